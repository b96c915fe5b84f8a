"""What the current request or task works on: its request id, tenant, user, run, conversation,
tool and tool call, for error bodies, audit rows and structured log lines.

Context variables: the request id, tenant and user are set by `agentplatform.ops.logs.RequestContextMiddleware`
at the start of every HTTP request (and reset at its end); the run id by the runtime when a run
is created or claimed and by the decision services when a request's run is known; the
conversation, tool and tool call by whoever learns them (`bind`). `log_fields()` is what the log
filter adds to every record.
"""
from __future__ import annotations

import contextvars
import os
import socket
import uuid
from typing import Any

_run_id: contextvars.ContextVar[uuid.UUID | None] = contextvars.ContextVar("agentplatform_run_id", default=None)
_fields: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("agentplatform_log_fields",
                                                                                default=None)

# The fields `bind` accepts, in the order log lines show them.
FIELDS = ("request_id", "tenant", "user_id", "conversation_id", "tool", "tool_call_id")


def set_run_id(run_id: uuid.UUID | str | None) -> None:
    """Remember `run_id` as the run the current request works on (None forgets it)."""
    _run_id.set(run_id if run_id is None or isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id)))


def current_run_id() -> uuid.UUID | None:
    """The run the current request works on, or None."""
    return _run_id.get()


def bind(**fields: Any) -> contextvars.Token:
    """Add or replace correlation fields (names from FIELDS; None removes one) for the current
    context. Returns the token `reset` takes to restore what was there before. Raises TypeError
    for an unknown field name."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise TypeError(f"unknown correlation fields: {sorted(unknown)}")
    merged = dict(_fields.get() or {})
    for name, value in fields.items():
        if value is None or value == "":
            merged.pop(name, None)
        else:
            merged[name] = str(value)
    return _fields.set(merged)


def reset(token: contextvars.Token) -> None:
    """Restore the fields as they were before the `bind` that returned `token`."""
    _fields.reset(token)


def clear() -> None:
    """Forget every field and the run id (the start of a request or task)."""
    _fields.set(None)
    _run_id.set(None)


def request_id() -> str:
    """The current request id ("" outside a request)."""
    return (_fields.get() or {}).get("request_id", "")


def log_fields() -> dict[str, str]:
    """Every known correlation field as strings, run_id included: what a log line carries."""
    fields = dict(_fields.get() or {})
    run_id = _run_id.get()
    if run_id is not None:
        fields["run_id"] = str(run_id)
    return fields


_HOSTNAME = socket.gethostname()


def holder() -> str:
    """This process as the holder of a run or the executor of a call: "hostname:pid". Read at each
    call, not at import: a prefork worker's pool processes are forks with their own pids."""
    return f"{_HOSTNAME}:{os.getpid()}"
