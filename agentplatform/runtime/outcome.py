"""What starting or resuming a run hands back to its caller."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from agentplatform.runtime.models import Run, RunEvent
from tools.calls import PendingConfirmation

# Told each stored event of a run, in order, once its step committed (the CLI prints them).
Listener = Callable[[RunEvent], None]


@dataclass
class RunOutcome:
    """What a caller gets back from starting or resuming a run.

    pending: confirmations the run waits for; `token` is set only for the requester's own
    confirmable calls and is shown once. tool_calls: in user-controlled execution, the proposed
    calls handed to the caller (OpenAI wire format).
    """

    run: Run
    pending: list[PendingConfirmation] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class RunParked(Exception):
    """The model was unavailable; the run was parked for a task retry instead of failing.

    A parked run is RUNNING with no lease (`lease_expires_at IS NULL`); `run_resume` claims it
    again. Raised only when the caller asked for it (`park_on_model_error=True`).
    """

    code = "MODEL_UNAVAILABLE"
