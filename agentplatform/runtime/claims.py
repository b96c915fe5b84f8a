"""Claiming a run to continue it: a run whose pending calls are all decided, a run parked by a
model outage, or a run whose holder died (its lease expired, recovery).

Every claim is a compare-and-set on the run's row, so of two processes that try, one wins and
the other leaves the run alone; the winner holds the run under a new lease and continues it
(`loop.advance`). Each function opens its own transactions: call it outside one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from core import clock
from core.sql.select import select_rows
from core.sql.statements import update_row
from agentplatform.runtime import decided, ending, loop, tracing
from agentplatform.runtime.context import build_tool_context
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.leases import new_lease
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.outcome import Listener, RunOutcome
from agentplatform.runtime.step import HeldRun
from approvals.models import ConfirmationRequest
from audit import events as audit
from tools.calls import parse_tool_calls
from tools.manager import ToolCallingManager

# A run whose lease expired this many times (its holder died each time) is not continued again:
# it is FAILED with RUN_LEASE_EXPIRED (a poison run must not kill workers forever).
MAX_RUN_RECOVERIES = 3

_RUN_RELATED = ("tenant", "user", "conversation")

# The run's highest event seq, read with its claim (EventRecorder continues from it).
_LAST_SEQ = {"last_event_seq": f"SELECT MAX(e.seq) FROM {RunEvent._meta.db_table} e WHERE e.run_id = {{t}}.id"}


@dataclass
class Claimed:
    """A run taken by `claim_decided`, with what the claim read under the run's lock: its
    confirmation requests (id -> request) and its highest event seq (0 without events)."""

    run: Run
    requests: dict[str, ConfirmationRequest]
    last_seq: int


def claim_decided(run_id) -> Claimed | None:
    """Take an AWAITING_CONFIRMATION run whose every pending call is decided; None otherwise.

    The run row is locked while its pending requests are checked, and the status change is still
    a compare-and-set, so a run that went back to waiting for a new turn in between cannot be
    claimed on the strength of the old turn's decisions. The requests and the last event seq read
    here are handed on, so the resume does not read them again.
    """
    with transaction.atomic():
        # Prebuilt statements (core.sql.select.select_rows): this claim runs on every resume, and
        # the ORM compiled its lock read alone in about 1.9 ms (docs/performance.md).
        # FOR NO KEY UPDATE: the lock the claim's UPDATE of non-key columns takes anyway, so rows
        # that refer to the run (its messages and events) can still be inserted meanwhile.
        found = select_rows(Run, {"id": run_id}, related=_RUN_RELATED, for_update="no key", extra=_LAST_SEQ)
        run = found[0] if found else None
        if run is None or run.status != Run.Status.AWAITING_CONFIRMATION:
            return None
        pending = run.state.get("pending") or {}
        requests = {str(r.pk): r for r in select_rows(ConfirmationRequest, {"id__in": list(pending.values())})}
        now = clock.now()
        if any(r.is_open_at(now) for r in requests.values()):
            return None  # the model is not called again until every pending call is decided
        lease = new_lease()
        claimed = update_row(Run, run.pk, {"status": Run.Status.RUNNING, "lease_expires_at": lease,
                                           "updated_at": clock.now()},
                             where={"status": Run.Status.AWAITING_CONFIRMATION})
    if claimed != 1:
        return None
    run.status, run.lease_expires_at = Run.Status.RUNNING, lease
    return Claimed(run, requests, run.last_event_seq or 0)


def claim_running(run_id, **condition: Any) -> Run | None:
    """Compare-and-set a new lease on a RUNNING run matching `condition` (field lookups of Run);
    return it fresh, or None (not claimable, or claimed by another process before this one read
    it back)."""
    lease = new_lease()
    claimed = Run.objects.filter(pk=run_id, status=Run.Status.RUNNING, **condition).update(
        lease_expires_at=lease, updated_at=clock.now())
    if claimed != 1:
        return None
    # Read back only with the lease this claim set. The claim and the read are two statements: a
    # claimant paused between them past its new lease (a loaded machine, a stopped process) can
    # find the row claimed again by another recoverer, and reading it unconditionally would hand
    # both processes the other's lease, so both would pass every fence as the run's holder.
    return Run.objects.select_related(*_RUN_RELATED).filter(
        pk=run_id, status=Run.Status.RUNNING, lease_expires_at=lease).first()


def run_resume(*, run_id, listener: Listener | None = None, manager: ToolCallingManager | None = None,
               park_on_model_error: bool = False) -> RunOutcome | None:
    """Resume a suspended run once every pending call is decided, or a run parked after
    ModelUnavailable.

    Idempotent: returns None when the run is unknown, not waiting, still waiting for a decision,
    or claimed by another resumer. Confirmed calls execute by consuming their confirmation (stored
    name and arguments, re-checked policy); cancelled ones answer REJECTED, expired ones
    CONFIRMATION_EXPIRED. Then the loop continues. park_on_model_error: when the model is
    unavailable, park the run and raise RunParked (the caller retries later) instead of failing
    it with MODEL_UNAVAILABLE. Raises RunClaimLost when recovery took the run over meanwhile.
    """
    claimed = claim_decided(run_id)
    if claimed is None:
        run = claim_running(run_id, lease_expires_at__isnull=True)
        if run is None:
            return None
        return _continue(HeldRun(run, EventRecorder(run, listener)), manager or ToolCallingManager(),
                         park_on_model_error)
    held = HeldRun(claimed.run, EventRecorder(claimed.run, listener, last_seq=claimed.last_seq))
    return _continue(held, manager or ToolCallingManager(), park_on_model_error, requests=claimed.requests)


def run_recover(*, run_id, listener: Listener | None = None, manager: ToolCallingManager | None = None,
                park_on_model_error: bool = False) -> RunOutcome | None:
    """Continue a RUNNING run whose lease expired (its holder died) from its recorded state.

    The claim is a compare-and-set on the expired lease, so one recoverer wins. Pending calls are
    executed by consuming their confirmations: a call whose transaction died with its worker left
    the confirmation CONFIRMED and runs now; one that committed left it CONSUMED with a SUCCEEDED
    idempotency record and answers from the stored result (keyless tools answer
    CONFIRMATION_INVALID); so nothing runs twice. A run recovered more than MAX_RUN_RECOVERIES
    times, or whose state cannot be continued, is FAILED with RUN_LEASE_EXPIRED. Each recovery
    writes an audit event RECOVERED. Returns None when the run is not RUNNING past its lease.
    """
    run = claim_running(run_id, lease_expires_at__lt=clock.now())
    if run is None:
        return None
    held = HeldRun(run, EventRecorder(run, listener))
    run.state["recoveries"] = int(run.state.get("recoveries") or 0) + 1
    problem = _unrecoverable(run)
    audit.run_recovered(tenant_id=run.tenant_id, status="RUN_LEASE_EXPIRED" if problem else "RESUMED",
                 request_id=run.request_id, conversation_id=run.conversation_id, run_id=run.pk,
                 message=problem or f"run lease expired; continued from its recorded state "
                                    f"(recovery {run.state['recoveries']})")
    if problem:
        ending.fail(held, "RUN_LEASE_EXPIRED", f"the run stopped responding and cannot be continued: {problem}")
        return RunOutcome(run)
    held.save("state")
    return _continue(held, manager or ToolCallingManager(), park_on_model_error, phase="recover")


def _unrecoverable(run: Run) -> str:
    """Why a run's recorded state cannot be continued ("" when it can)."""
    if run.state["recoveries"] > MAX_RUN_RECOVERIES:
        return f"its lease expired {run.state['recoveries']} times"
    messages = run.state.get("messages")
    if not isinstance(messages, list) or not messages:
        return "it has no recorded messages"
    pending = run.state.get("pending") or {}
    if pending:
        index = run.state.get("assistant_index")
        if not isinstance(index, int) or not 0 <= index < len(messages):
            return "its waiting assistant message is missing"
        if not set(pending) <= {call.id for call in parse_tool_calls(messages[index])}:
            return "its pending calls do not match the assistant message"
        if ConfirmationRequest.objects.filter(pk__in=set(pending.values())).count() != len(set(pending.values())):
            return "a confirmation request of its pending calls is missing"
    return ""


def _continue(held: HeldRun, manager: ToolCallingManager, park: bool,
              requests: dict[str, ConfirmationRequest] | None = None, *, phase: str = "resume") -> RunOutcome:
    """Drive a run this process holds: answer its decided pending calls (if any), then the loop.
    requests: the pending calls' confirmation requests by id, when the claim already read them.
    phase: "resume" or "recover", named on the span. Traced as a stretch of the run's own trace (runtime.tracing)."""
    run = held.run
    with tracing.invoke_agent(phase, run) as span:
        try:
            if run.state.get("pending"):
                ctx, waiting = decided.answer_pending(held, manager, requests)
                if run.status == Run.Status.AWAITING_CONFIRMATION:
                    return RunOutcome(run, pending=waiting)
            else:
                ctx = build_tool_context(run, held=held)
            return loop.advance(held, ctx, manager, park=park)
        finally:
            tracing.run_ended(span, run)
