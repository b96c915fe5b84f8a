"""The server-side ToolContext of a run: who calls the tools, built from the run's row."""
from __future__ import annotations

import uuid

from agentplatform.runtime.leases import lock_held
from agentplatform.runtime.models import Run
from agentplatform.runtime.selectors import conversation_excerpt
from agentplatform.runtime.step import HeldRun
from tools import search as tool_search
from tools.context import ToolContext


def build_tool_context(run: Run, *, confirmations: dict[str, uuid.UUID] | None = None,
                       held: HeldRun | None = None) -> ToolContext:
    """The server-side ToolContext of a run: identity from the run's row, never from model output.

    confirmations: tool call id -> the confirmation request it consumes. held: the run as this
    process holds it, when it drives the run (the fence then checks the lease of its step). For a
    RUNNING run the context's fence makes the pipeline refuse to execute (or ask a human) once this
    process no longer holds the run.
    """
    return ToolContext(
        tenant=run.tenant, user=run.user, conversation_id=run.conversation_id, run_id=run.id,
        request_id=run.request_id, confirmations=dict(confirmations or {}),
        # What earlier tool_search calls of this run found stays offered (tools.search).
        discovered=tool_search.discovered_in((run.state or {}).get("messages") or []),
        # Read only if a call of this run asks for a confirmation (approvers see it).
        conversation_excerpt=lambda: conversation_excerpt(conversation=run.conversation),
        # Fenced while this process holds the run (RUNNING with its lease); a caller executing the
        # handed-back calls of a finished run (user-controlled execution) holds no lease to check.
        fence=(lambda: _fence(run, held)) if run.status == Run.Status.RUNNING else None,
    )


def _fence(run: Run, held: HeldRun | None) -> str:
    """Check, inside the caller's transaction, that this process still holds `run` (RUNNING with
    the lease it set). The row stays locked until that transaction ends, so a recovery's claim
    waits for it, and a holder whose lease was taken over (or whose run was cancelled) raises
    RunClaimLost before executing anything.
    Returns the lease checked (ISO 8601): the token the execution's audit row names."""
    lease = lock_held(run, run.lease_expires_at, "nothing was executed") if held is None \
        else held.lock("nothing was executed")
    return lease.isoformat() if lease is not None else ""
