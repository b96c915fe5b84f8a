"""The run a request is working on, so every error body of chat, confirm and approve can name it
(issue 8 item 14: a client that gets an error can still learn the real outcome from the run).

A context variable: set by the runtime when a run is created or claimed and by the decision
services when a request's run is known; read by the API when it builds an error body; reset at the
start of every API request.
"""
from __future__ import annotations

import contextvars
import uuid

_run_id: contextvars.ContextVar[uuid.UUID | None] = contextvars.ContextVar("agentplatform_run_id", default=None)


def set_run_id(run_id: uuid.UUID | str | None) -> None:
    """Remember `run_id` as the run the current request works on (None forgets it)."""
    _run_id.set(run_id if run_id is None or isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id)))


def current_run_id() -> uuid.UUID | None:
    """The run the current request works on, or None."""
    return _run_id.get()
