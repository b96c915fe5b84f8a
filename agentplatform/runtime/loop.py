"""The agent loop (DESIGN section 5): call the model with memory and the offered tools, run every
proposed call through the ToolCallingManager, suspend on gated calls, resume after decisions.

No database transaction is held across a model call; each state change is saved on its own.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from agentplatform import clock, correlation
from agentplatform.db import (Together, insert_row, release_connection_while_waiting, select_rows,
                              transaction_usable, update_row)
from agentplatform.text import loads_json
from agentplatform.errors import DomainError, ModelQuotaExceeded
from agentplatform.llm import pending as llm_pending
from agentplatform.llm.errors import ModelError
from agentplatform.llm.types import ModelTurn
from agentplatform.llm.window import complete_in_window
from agentplatform.runtime import quota
from agentplatform.runtime.eligibility import is_eligible
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from agentplatform.runtime.selectors import conversation_excerpt, memory_messages
from approvals import cancellation, expiry, presentation
from approvals.amendments import describe_changes
from approvals.models import Approval, ConfirmationRequest
from audit import events as audit
from audit import metrics
from tools.context import FenceLost, ToolContext
from agentplatform.redaction import mask_text
from tools.masking import mask_value
from tools.calls import PendingConfirmation, parse_tool_calls
from tools.manager import ToolCallingManager
from tools.results import ToolResult
from tools import search as tool_search

SYSTEM_PROMPT = (
    "You are an enterprise business agent. Rules: 1. Inventory, orders and live status must come from tools, "
    "never guessed. 2. When a tool returns CONFIRMATION_REQUIRED, show the user what must be confirmed. "
    "3. Do not retry a high-risk tool before it is confirmed. 4. When a tool fails, state the error exactly; "
    "never pretend it succeeded. 5. Never ask the user for a tenant id, permissions or system tokens. "
    "6. REJECTED means a human refused the action (the result says who and why); CONFIRMATION_EXPIRED means "
    "nobody decided in time; SUPERSEDED means a newer request replaced it; none of them ran. "
    "7. APPROVER_GUIDANCE means an approver answered with guidance instead of deciding: nothing ran, it is not "
    "a rejection; follow the guidance. WITHDRAWN means the user withdrew the request: nothing ran."
)  # seed 002 section 22, plus rule 6 (DESIGN section 9: keep rejected and expired distinct)
# The metrics' prompt_version label (seed 002 section 37): which system prompt a run was driven by.
metrics.PROMPT_VERSION = hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()[:8]

Listener = Callable[[RunEvent], None]

# A run whose lease expired this many times (its holder died each time) is not continued again:
# it is FAILED with RUN_LEASE_EXPIRED (a poison run must not kill workers forever).
MAX_RUN_RECOVERIES = 3


class RunClaimLost(FenceLost):
    """This process no longer holds the run: its lease expired and another worker recovered it,
    or the run was cancelled.

    Raised by a fenced write instead of overwriting the new holder's state, and by the fence the
    pipeline checks inside the transaction that would execute a tool; the caller stops.
    `run_id`: the run that was lost.
    """

    def __init__(self, message: str, *, run_id=None) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunParked(Exception):
    """The model was unavailable; the run was parked for a task retry instead of failing.

    A parked run is RUNNING with no lease (`lease_expires_at IS NULL`); `run_resume` claims it
    again. Raised only when the caller asked for it (`park_on_model_error=True`).
    """

    code = "MODEL_UNAVAILABLE"


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


def build_tool_context(run: Run, *, confirmations: dict[str, uuid.UUID] | None = None) -> ToolContext:
    """The server-side ToolContext of a run: identity from the run's row, never from model output.
    For a run this process holds, its fence makes the pipeline refuse to execute (or ask a human)
    once this process no longer holds the run."""
    return ToolContext(
        tenant=run.tenant, user=run.user, conversation_id=run.conversation_id, run_id=run.id,
        request_id=run.request_id, confirmations=dict(confirmations or {}),
        # What earlier tool_search calls of this run found stays offered (tools.search).
        discovered=tool_search.discovered_in((run.state or {}).get("messages") or []),
        # Read only if a call of this run asks for a confirmation (approvers see it).
        conversation_excerpt=lambda: conversation_excerpt(conversation=run.conversation),
        # Fenced while this process holds the run (RUNNING with its lease); a caller executing the
        # handed-back calls of a finished run (user-controlled execution) holds no lease to check.
        fence=(lambda: _fence(run)) if run.status == Run.Status.RUNNING else None,
    )


def _fence(run: Run) -> str:
    """Check, inside the caller's transaction, that this process still holds `run` (RUNNING with
    the lease it set). The row is locked (`FOR NO KEY UPDATE`, the lock an UPDATE of it would take,
    without writing a new row version: issue 11) until that transaction ends, so a recovery's
    claim waits for it, and a holder whose lease was taken over (or whose run was cancelled)
    raises RunClaimLost before executing anything (docs/decisions.md, item 11).
    Returns the lease checked (ISO 8601): the token the execution's audit row names."""
    lease = _lock_held(run, "nothing was executed")
    return lease.isoformat() if lease is not None else ""


def _lock_held(run: Run, consequence: str) -> datetime.datetime | None:
    """Lock the run's row (FOR NO KEY UPDATE) while it is RUNNING with the lease this process
    holds; raises RunClaimLost otherwise, returns that lease. A save of the current step that is
    still held (written at the step's end) has not changed the row yet: the lease checked is then
    the one the row has, which that save's own compare-and-set checks again. Nothing is written
    here, so a savepoint around the caller that rolls back leaves the held save as it was."""
    deferred = getattr(run, "_deferred", None)
    lease = deferred.held if deferred is not None and deferred.values else run.lease_expires_at
    held = select_rows(Run, {"id": run.pk, "status": Run.Status.RUNNING, "lease_expires_at": lease},
                       for_update="no key", only=("id",))
    if len(held) != 1:
        raise RunClaimLost(f"run {run.pk} is no longer held by this process; {consequence}", run_id=run.pk)
    return lease


def _lease() -> datetime.datetime:
    return clock.now() + datetime.timedelta(seconds=settings.AGENT_RUN_LEASE_SECONDS)


class _Step:
    """One transaction per step of a run (issue 11): everything one step writes commits together,
    with one WAL flush: the assistant's turn with its confirmation requests, audit rows, events and
    the run's state; a consumption with its idempotency record, business change, audit row, tool
    messages and events; a final answer with its message, run state and events. Nothing is
    committed asynchronously, and no transaction is held across a model call.

    Events emitted inside the step are written in one INSERT at its end and shown to the listener
    only after the commit. On the way out:
    - a lost fence (RunClaimLost/FenceLost), or a database error that left the transaction
      aborted, rolls the whole step back: a holder that lost the run leaves nothing behind, the
      new holder does the step itself;
    - any other exception (a refusal raised to the caller, a tool error propagated by
      TOOLS_PROPAGATE_EXCEPTIONS, a database error a savepoint contained) keeps what the step
      wrote (the audit rows of the refusal or failure) and then re-raises, as the earlier
      per-statement commits did; the caller then ends the run in a step of its own;
    - a commit hook (`transaction.on_commit`, e.g. a tool's) that raises after the COMMIT leaves
      the step committed: its events are told, the run keeps its new lease, the error propagates.
    A step inside a step is part of the outer one.
    """

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self.outer = False

    def __enter__(self) -> "_Step":
        if self.recorder._held is not None:
            return self  # already inside a step: its transaction and its events
        self.outer = True
        self.seq = self.recorder.seq
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        # The first commit hook of the step: it runs only once the COMMIT succeeded, so a hook a
        # tool registered after it that raises is not mistaken for a failed commit (__exit__).
        self.committed = False
        transaction.on_commit(self._mark_committed)
        self.recorder.hold()
        self.recorder.run._deferred = _Deferred()
        return self

    def _mark_committed(self) -> None:
        self.committed = True

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.outer:
            return False
        run = self.recorder.run
        deferred, run._deferred = run._deferred, None  # the step's held writes: sent now or forgotten
        if exc_type is not None and (issubclass(exc_type, FenceLost) or not transaction_usable()) \
                or connection.needs_rollback:
            self._drop(run, deferred)
            self.recorder.drop_held(self.seq)
            self.atomic.__exit__(exc_type, exc, tb)  # rolls back
            return False
        try:
            self._write(run, deferred)
        except BaseException as error:
            self._drop(run, deferred)
            self.recorder.drop_held(self.seq)
            self.atomic.__exit__(type(error), error, error.__traceback__)
            raise
        try:
            self.atomic.__exit__(None, None, None)  # commits
        except BaseException:
            if self.committed:  # committed; a commit hook registered later (a tool's) raised
                self.recorder.tell()
                raise
            self._drop(run, deferred)
            self.recorder.drop_held(self.seq)
            raise
        self.recorder.tell()
        return False  # an exception other than the above is re-raised after the commit

    @staticmethod
    def _drop(run: Run, deferred: "_Deferred") -> None:
        """The step rolls back: its held writes are forgotten and the run keeps the lease its row
        still has."""
        if deferred.values:
            run.lease_expires_at = deferred.held

    def _write(self, run: Run, deferred: "_Deferred") -> None:
        """The step's held writes in one statement (agentplatform.db.Together): its messages, the
        run's row (fenced: RunClaimLost when this process no longer holds it) and its events."""
        together = Together()
        if deferred.messages:
            together.insert(Message, deferred.messages)
        saved = None
        if deferred.values:
            saved = together.update(Run, run.pk, deferred.values,
                                    where={"status": Run.Status.RUNNING, "lease_expires_at": deferred.held})
        events = self.recorder.held_into(together)
        admitted = together.statement(*quota.admission_statement(tenant_id=run.tenant_id)) if deferred.admit else None
        results = together.send()
        if saved is not None and len(results[saved]) != 1:
            raise RunClaimLost(f"run {run.pk} is no longer held by this process", run_id=run.pk)
        self.recorder.held_stored(results[events] if events is not None else [])
        if admitted is not None:
            _admitted(run, lambda: quota.admission_check(results[admitted][0]))


@dataclass
class _Deferred:
    """What a step wrote of its run and messages, sent with its events when it ends (issue 11):
    messages (rows), values of the run's row, and the lease the run's row held when the step began
    to change it (the fence of that UPDATE)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    held: Any = None
    admit: bool = False  # the run's next model call is counted against the tenant's quota


def _save(run: Run, *fields: str, park: bool = False) -> None:
    """Write `fields` of a run this process holds and renew its lease (None once it stops running,
    or when `park`). Fenced: the UPDATE matches only while the row is RUNNING with the lease this
    process set, so a holder that lost its lease to recovery raises RunClaimLost instead of
    overwriting the new holder's state."""
    held = run.lease_expires_at
    lease = _lease() if run.status == Run.Status.RUNNING and not park else None
    now = clock.now()
    values = {name: getattr(run, name) for name in fields if name not in ("lease_expires_at", "updated_at")}
    deferred = getattr(run, "_deferred", None)
    if deferred is not None:
        # Inside a step: written with the step's events when it ends, still fenced by the lease the
        # row held (the first deferred save's), in the step's transaction.
        if not deferred.values:
            deferred.held = held
        deferred.values.update({**values, "lease_expires_at": lease, "updated_at": now})
        run.lease_expires_at, run.updated_at = lease, now
        return
    changed = update_row(Run, run.pk, {**values, "lease_expires_at": lease, "updated_at": now},
                         where={"status": Run.Status.RUNNING, "lease_expires_at": held})
    if changed != 1:
        raise RunClaimLost(f"run {run.pk} is no longer held by this process", run_id=run.pk)
    run.lease_expires_at, run.updated_at = lease, now


def _admit_in_step(run: Run) -> None:
    """Count the run's next model call against the tenant's daily budget inside the current step's
    transaction (issue 11: no statement and no commit of its own right before the call). A refusal
    is kept on the run and raised where the model call would be made (`_admission`)."""
    deferred = getattr(run, "_deferred", None)
    if deferred is not None:
        deferred.admit = True  # counted with the step's other writes when it ends (_Step._write)
        return
    _admitted(run, lambda: quota.model_call_admit(tenant_id=run.tenant_id))


def _admitted(run: Run, admit: Callable[[], int]) -> None:
    """Keep on the run what `admit()` (the quota's count or check) said of its next model call
    (see `_admission`)."""
    try:
        admit()
    except ModelQuotaExceeded as error:
        run._admission = error
    else:
        run._admission = True


def _admission(run: Run) -> None:
    """Before a model call: use the admission counted in the step before it, or count it now.
    Raises ModelQuotaExceeded past the tenant's budget."""
    admitted, run._admission = getattr(run, "_admission", None), None
    if admitted is None:
        quota.model_call_admit(tenant_id=run.tenant_id)  # the tenant's daily budget (429 past it)
    elif isinstance(admitted, Exception):
        raise admitted


def run_start(
    *,
    user,
    message: str,
    conversation: Conversation,
    request_id: str = "",
    internal_tool_execution: bool | None = None,
    listener: Listener | None = None,
    manager: ToolCallingManager | None = None,
) -> RunOutcome:
    """Start a run for one user message and drive it until it answers, waits, or fails.

    conversation must already belong to `user` (see services.conversation_get_or_create).
    internal_tool_execution: None = settings.AGENT_INTERNAL_TOOL_EXECUTION; False = hand the
    proposed calls to the caller (seed 000 section 5.3). Raises ToolPermissionDenied when the model
    proposes a tool the user may not use (after marking the run FAILED).
    """
    run = run_create(user=user, message=message, conversation=conversation, request_id=request_id,
                     internal_tool_execution=internal_tool_execution, lease_expires_at=_lease(), admit=True)
    correlation.set_run_id(run.pk)
    correlation.bind(conversation_id=conversation.pk)
    recorder = EventRecorder(run, listener, last_seq=0)  # a new run has no events yet
    return _advance(run, build_tool_context(run), recorder, manager or ToolCallingManager())


def run_create(*, user, message: str, conversation: Conversation, request_id: str = "",
               internal_tool_execution: bool | None = None, lease_expires_at=None, admit: bool = False) -> Run:
    """Store a new RUNNING run for one user message (and the message), nothing more.

    conversation: stored, or new and not saved yet (`services.conversation_new`): it is then
    created in the same transaction as the run (one commit for a first message).
    lease_expires_at: the caller's lease when it drives the run now (run_start); None stores the
    run parked, for `run_resume` to claim in a worker (POST /chat/ with `Prefer: respond-async`,
    issue 12 item 3); a parked run whose message was lost is pushed by the recovery sweep.
    """
    if internal_tool_execution is None:
        internal_tool_execution = settings.AGENT_INTERNAL_TOOL_EXECUTION
    fresh = conversation._state.adding
    with transaction.atomic():
        # One statement (agentplatform.db.Together; these models have no save() override and no
        # signal receivers): the first step of every run (issue 11).
        together = Together()
        if fresh:
            together.insert_instance(conversation)
        else:
            together.update(Conversation, conversation.pk, {"updated_at": clock.now()})
        # `internal` is stored from the start: a run recovered after a crash must keep it.
        run = Run(tenant_id=user.tenant_id, user=user, conversation=conversation,
                  request_id=request_id[:64] or uuid.uuid4().hex, lease_expires_at=lease_expires_at,
                  state={"messages": [{"role": "user", "content": message}], "internal": internal_tool_execution})
        together.insert_instance(run)
        together.insert_instance(Message(conversation=conversation, run=run, role="user", content=message))
        # The run's first model call follows at once: counted in this statement.
        admitted = together.statement(*quota.admission_statement(tenant_id=run.tenant_id)) if admit else None
        results = together.send()
        if admitted is not None:
            _admitted(run, lambda: quota.admission_check(results[admitted][0]))
    # A conversation created with its first run holds nothing else yet: no memory, nothing
    # waiting (the loop skips reading them).
    run._fresh_conversation = fresh
    if user.tenant_id is not None and getattr(user, "tenant", None) is not None:
        run.tenant = user.tenant  # loaded with the user already: no second read for the ToolContext
    return run


_RUN_RELATED = ("tenant", "user", "conversation")


@dataclass
class _Claimed:
    """A run taken by `_claim`, with what the claim read under the run's lock: its confirmation
    requests (id -> request) and its highest event seq (0 without events)."""

    run: Run
    requests: dict[str, ConfirmationRequest]
    last_seq: int


def _claim(run_id) -> _Claimed | None:
    """Take an AWAITING_CONFIRMATION run whose every pending call is decided.

    The run row is locked while its pending requests are checked, and the status change is still
    a compare-and-set, so a run that went back to waiting for a new turn in between cannot be
    claimed on the strength of the old turn's decisions. The requests and the last event seq read
    here are handed on, so the resume does not read them again.
    """
    with transaction.atomic():
        # Prebuilt statements (agentplatform.db.select_rows): this claim runs on every resume, and
        # the ORM compiled its lock read alone in about 1.9 ms (issue 11).
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
        lease = _lease()
        claimed = update_row(Run, run.pk, {"status": Run.Status.RUNNING, "lease_expires_at": lease,
                                           "updated_at": clock.now()},
                             where={"status": Run.Status.AWAITING_CONFIRMATION})
    if claimed != 1:
        return None
    run.status, run.lease_expires_at = Run.Status.RUNNING, lease
    return _Claimed(run, requests, run.last_event_seq or 0)


# The run's highest event seq, read with its claim (EventRecorder continues from it).
_LAST_SEQ = {"last_event_seq": f"SELECT MAX(e.seq) FROM {RunEvent._meta.db_table} e WHERE e.run_id = {{t}}.id"}


def _claim_running(run_id, **condition: Any) -> Run | None:
    """Compare-and-set a new lease on a RUNNING run matching `condition`; return it fresh, or None
    (not claimable, or claimed by another process before this one read it back)."""
    lease = _lease()
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
    """Resume a suspended run once every pending call is decided (DESIGN section 5.4), or a run
    parked after ModelUnavailable.

    Idempotent: returns None when the run is unknown, not waiting, still waiting for a decision,
    or claimed by another resumer. Confirmed calls execute by consuming their confirmation (stored
    name and arguments, re-checked policy); cancelled ones answer REJECTED, expired ones
    CONFIRMATION_EXPIRED. Then the loop continues. park_on_model_error: when the model is
    unavailable, park the run and raise RunParked (the caller retries later) instead of failing
    it with MODEL_UNAVAILABLE. Raises RunClaimLost when recovery took the run over meanwhile.
    """
    claimed = _claim(run_id)
    if claimed is None:
        run = _claim_running(run_id, lease_expires_at__isnull=True)
        if run is None:
            return None
        return _continue(run, EventRecorder(run, listener), manager or ToolCallingManager(), park_on_model_error)
    return _continue(claimed.run, EventRecorder(claimed.run, listener, last_seq=claimed.last_seq),
                     manager or ToolCallingManager(), park_on_model_error, requests=claimed.requests)


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
    run = _claim_running(run_id, lease_expires_at__lt=clock.now())
    if run is None:
        return None
    recorder = EventRecorder(run, listener)
    run.state["recoveries"] = int(run.state.get("recoveries") or 0) + 1
    problem = _unrecoverable(run)
    audit.run_recovered(tenant_id=run.tenant_id, status="RUN_LEASE_EXPIRED" if problem else "RESUMED",
                 request_id=run.request_id, conversation_id=run.conversation_id, run_id=run.pk,
                 message=problem or f"run lease expired; continued from its recorded state "
                                    f"(recovery {run.state['recoveries']})")
    if problem:
        _fail(run, recorder, "RUN_LEASE_EXPIRED", f"the run stopped responding and cannot be continued: {problem}")
        return RunOutcome(run)
    _save(run, "state")
    return _continue(run, recorder, manager or ToolCallingManager(), park_on_model_error)


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


def _continue(run: Run, recorder: EventRecorder, manager: ToolCallingManager, park: bool,
              requests: dict[str, ConfirmationRequest] | None = None) -> RunOutcome:
    """Drive a run this process holds: answer its decided pending calls (if any), then the loop.
    requests: the pending calls' confirmation requests by id, when the claim already read them."""
    if run.state.get("pending"):
        ctx, waiting = _answer_pending(run, recorder, manager, requests)
        if run.status == Run.Status.AWAITING_CONFIRMATION:
            return RunOutcome(run, pending=waiting)
    else:
        ctx = build_tool_context(run)
    return _advance(run, ctx, recorder, manager, park=park)


def _decision_answer(request: ConfirmationRequest) -> tuple[ToolResult, dict[str, Any]]:
    """What the model is told about a call whose request ended without executing, and the event
    payload for the requester: who decided, what, and why (DESIGN section 8). Reasons are masked."""
    reason = mask_value("reason", request.decision_reason or "")
    status = ConfirmationRequest.Status
    decider = presentation.decider(request)
    if request.status == status.CANCELLED:
        if decider and decider["role"] == "approver":
            message = f"an approver ({decider['username']}) rejected the request: {reason or 'no reason given'}"
        elif decider:
            message = "the requester declined the request"
        else:
            message = f"the request was cancelled: {reason or 'no reason given'}"
        result = ToolResult.failure("REJECTED", f"{message}; nothing was done: {request.summary}",
                                    data={"decided_by": decider, "reason": reason or None})
    elif request.status == status.SUPERSEDED:
        result = ToolResult.failure("SUPERSEDED", f"a newer request for the same action replaced this one; nothing "
                                                  f"was done here: {request.summary}", data={"reason": reason or None})
    elif request.status == status.RESPONDED:
        # Issue 13 item 3: guidance, not a decision. Not a success (nothing ran) and not a
        # rejection (the action is not refused): the model re-plans with it.
        who = decider["username"] if decider else "an approver"
        result = ToolResult.failure(
            "APPROVER_GUIDANCE",
            f"an approver ({who}) did not run this call and answered with guidance instead; nothing was done "
            f"and the request is closed. Guidance: \"{reason}\". Follow it: change the plan or ask the user; "
            f"a changed call needs a new request.", retryable=True, terminal=False,
            data={"responded_by": decider, "guidance": reason or None})
    elif request.status == status.WITHDRAWN:
        result = ToolResult.failure("WITHDRAWN", f"the requester withdrew the request; nothing was done: "
                                                 f"{request.summary}", data={"decided_by": decider,
                                                                             "reason": reason or None})
    elif request.status == status.REFUSED:
        code = request.outcome_code or "REFUSED"
        result = ToolResult.failure(code, f"refused when it was about to run: {reason}; nothing was done",
                                    data={"reason": reason or None})
    else:
        result = ToolResult.failure("CONFIRMATION_EXPIRED",
                                    f"nobody confirmed in time; nothing was done: {request.summary}")
    payload = {"tool_call_id": request.tool_call_id, "tool": request.tool_name, "success": False,
               "code": result.code, "confirmation_id": str(request.pk), "status": request.status,
               "decided_by": decider, "reason": reason or None}
    if request.status == status.RESPONDED:
        payload["guidance"] = reason or None
    return result, payload


def _answer_pending(run: Run, recorder: EventRecorder, manager: ToolCallingManager,
                    requests: dict[str, ConfirmationRequest] | None = None) -> tuple[ToolContext, list]:
    """Execute the confirmed pending calls, answer the others truthfully (REJECTED with who and
    why, CONFIRMATION_EXPIRED, SUPERSEDED, or the refusal code), append one tool message per
    answered call id. Returns (context, calls still waiting): a call whose policy became stricter
    since its decision waits again (the run goes back to AWAITING_CONFIRMATION). One step: the
    consumption, its business change, audit rows, tool messages, events and the run's state
    commit together."""
    try:
        with _Step(recorder):
            return _answer_pending_step(run, recorder, manager, requests)
    except DomainError as error:
        _fail(run, recorder, error.code, error.message)
        raise
    except RunClaimLost:
        raise
    except Exception as error:  # DESIGN step 9: an error propagated to the caller ends the run too
        _fail(run, recorder, "SYSTEM_ERROR", f"the run stopped on {type(error).__name__}")
        raise


def _answer_pending_step(run: Run, recorder: EventRecorder, manager: ToolCallingManager,
                         requests: dict[str, ConfirmationRequest] | None) -> tuple[ToolContext, list]:
    pending: dict[str, str] = run.state.get("pending") or {}
    ids = set(pending.values())
    if requests is None or not ids <= set(requests):
        requests = {str(r.pk): r for r in ConfirmationRequest.objects.filter(pk__in=list(ids))}
    assistant = run.state["messages"][run.state["assistant_index"]]
    runnable = (ConfirmationRequest.Status.CONFIRMED, ConfirmationRequest.Status.CONSUMED)
    confirmed = {call_id: uuid.UUID(cid) for call_id, cid in pending.items() if requests[cid].status in runnable}
    ctx = build_tool_context(run, confirmations=confirmed)
    # An approver's edit replaced a call's arguments: the stored, edited binding is what runs
    # (DESIGN section 9: the server's record is the truth), and the model is told what changed.
    edited = {call_id: requests[pending[call_id]] for call_id in confirmed
              if requests[pending[call_id]].revision > 0}
    edits = {call_id: _edits_of(request) for call_id, request in edited.items()}

    def emit(kind: str, payload: dict[str, Any]) -> None:
        # The requester's event of an edited call says who changed what (issue 13 item 3).
        if kind == RunEvent.Type.TOOL_EXECUTION_COMPLETED and payload.get("tool_call_id") in edits:
            payload = {**payload, **edits[payload["tool_call_id"]]}
        recorder.emit(kind, payload)

    executed = manager.execute_tool_calls(ctx, _with_edits(assistant, edited), on_event=emit,
                                          only=set(confirmed)) if confirmed else None
    answers: dict[str, dict[str, Any]] = {}
    waiting = []
    for outcome in executed.outcomes if executed else []:
        if outcome.pending is not None:
            waiting.append(outcome.pending)
        elif outcome.call.id in edited:
            answers[outcome.call.id] = _edited_answer(outcome, edits[outcome.call.id])
        else:
            answers[outcome.call.id] = outcome.tool_message()
    undecided = []
    for call_id, cid in pending.items():
        if call_id in answers or call_id in confirmed:
            continue
        request = requests[cid]
        if request.status == ConfirmationRequest.Status.PENDING:
            if request.is_open_at(clock.now()):
                undecided.append(call_id)  # cannot happen after a claim; kept waiting, never guessed
                continue
            # Past its deadline but not swept yet: expire it now (audited), so the request and the
            # answer the model gets say the same.
            expiry.confirmations_expire(request_ids=[request.pk])
            request.refresh_from_db()
        if request.decided_by_id is not None:
            request.decided_by = get_user_model().objects.filter(pk=request.decided_by_id).first()
        result, payload = _decision_answer(request)
        payload["tool_call_id"] = call_id
        recorder.emit(RunEvent.Type.TOOL_EXECUTION_COMPLETED, payload)
        answers[call_id] = {"role": "tool", "tool_call_id": call_id, "content": result.to_json()}
    # Answer every decided call id exactly once, in the model's order.
    for call in parse_tool_calls(assistant):
        if call.id in answers:
            _append(run, answers[call.id])
    still = {p.tool_call_id: p.confirmation_id for p in waiting}
    still.update({call_id: pending[call_id] for call_id in undecided})
    run.state["pending"] = still
    if still:
        run.status = Run.Status.AWAITING_CONFIRMATION
    _save(run, "status", "state")
    if not still and run.iterations < settings.AGENT_MAX_ITERATIONS:
        _admit_in_step(run)  # the model is called next
    if executed is not None and executed.offered is not None:
        # Consuming re-queried the offered tools just now (permissions, tenant policy, risk are
        # re-checked at consume time); the rest of this run is offered the same set.
        ctx = replace(ctx, confirmations={}, offered=frozenset(executed.offered), offered_tools=executed.offered)
    else:
        ctx = ctx.with_confirmations({})
    return ctx, waiting


def _with_edits(assistant: dict[str, Any], edited: dict[str, ConfirmationRequest]) -> dict[str, Any]:
    """A copy of the assistant message whose edited calls carry their request's stored (edited,
    normalised) arguments; the stored message keeps what the model asked for."""
    if not edited:
        return assistant
    calls = []
    for raw in assistant.get("tool_calls") or []:
        request = edited.get(str(raw.get("id") or ""))
        if request is not None:
            raw = {**raw, "function": {**(raw.get("function") or {}),
                                       "arguments": json.dumps(request.arguments, ensure_ascii=False)}}
        calls.append(raw)
    return {**assistant, "tool_calls": calls}


def _edits_of(request: ConfirmationRequest) -> dict[str, Any]:
    """Who edited `request` and what they changed: {"edited_by": [usernames], "changes": [{"field",
    "from", "to"}] (masked), "edit_note": text for the model, and the call that ran, for the
    requester's card: "summary" (the tool's, of the edited arguments), "masked_arguments", "facts"
    (captured at the last edit, masked)}."""
    rows = list(Approval.objects.filter(request_id=request.pk, decision=Approval.Decision.EDIT)
                .select_related("approver").order_by("revision"))
    note = "; ".join(f"{e.approver.get_username()} changed {describe_changes(e.changes)}" for e in rows)
    return {"edited_by": [e.approver.get_username() for e in rows], "changes": [c for e in rows for c in e.changes],
            "edit_note": f"approvers edited the arguments before it ran ({note}); it ran with the edited arguments",
            "summary": request.summary, "masked_arguments": request.masked_arguments,
            "facts": (request.approval_context or {}).get("facts") or {}}


def _edited_answer(outcome, edit: dict[str, Any]) -> dict[str, Any]:
    """The tool message of a call an approver edited: who changed what, then the result (the
    model is told, issue 13 item 3)."""
    result = replace(outcome.result, message=f"{edit['edit_note']}. {outcome.result.message}")
    return {"role": "tool", "tool_call_id": outcome.call.id, "content": result.to_json()}


def _excerpt(memory: list[dict[str, Any]], messages: list[dict[str, Any]], limit: int = 3) -> str:
    """The last `limit` user messages of the conversation (memory, then this run), for approvers
    to see what led to a request; as runtime.selectors.conversation_excerpt, from memory."""
    said = [m["content"] for m in [*memory, *messages] if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return "\n".join(f"user: {text[:300]}" for text in said[-limit:])


def _append(run: Run, message: dict[str, Any]) -> None:
    if isinstance(message.get("content"), str):
        # Kept in the run's memory (sent to the model again) and stored: masked. Tool-call arguments
        # stay as proposed: the pipeline hashes them against the confirmation's binding.
        message = {**message, "content": mask_text(message["content"])}
    run.state.setdefault("messages", []).append(message)
    if message["role"] in ("assistant", "tool"):
        _message_insert(run, role=message["role"], content=message.get("content") or "",
                        tool_calls=message.get("tool_calls"), tool_call_id=message.get("tool_call_id", ""),
                        in_memory=settings.AGENT_MEMORY_FULL_TOOL_TRACE)


def _message_insert(run: Run, *, role: str, content: str, in_memory: bool, tool_calls: Any = None,
                    tool_call_id: str = "") -> None:
    """Store one Message of the run (a single INSERT; the loop writes one per model turn and tool)."""
    content = mask_text(content)  # what the model wrote is shown to people and kept (DESIGN section 8)
    row = {"conversation_id": run.conversation_id, "run_id": run.pk, "role": role, "content": content,
           "tool_calls": tool_calls, "tool_call_id": tool_call_id, "in_memory": in_memory}
    deferred = getattr(run, "_deferred", None)
    if deferred is not None:
        deferred.messages.append(row)  # inside a step: written with its events when it ends
        return
    insert_row(Message, row)


def _finish(run: Run, recorder: EventRecorder, answer: str, *, stop_reason: str = "stop",
            waiting: list | None = None) -> RunOutcome:
    """The final answer: its message, the run COMPLETED and the FINAL_TEXT and DONE events, one step."""
    with _Step(recorder):
        outcome = _finish_step(run, recorder, answer, stop_reason=stop_reason, waiting=waiting)
    metrics.run_finished(iterations=run.iterations, tenant_id=run.tenant_id)
    return outcome


def _finish_step(run: Run, recorder: EventRecorder, answer: str, *, stop_reason: str, waiting: list | None
                 ) -> RunOutcome:
    if waiting:  # issue 10 item 11: an answer never claims a waiting action happened unopposed
        answer = llm_pending.qualify_answer(answer, llm_pending.waiting_calls(conversation_id=run.conversation_id))
    answer = mask_text(answer)  # the answer is stored on the run, shown and returned (DESIGN section 8)
    recorder.emit(RunEvent.Type.FINAL_TEXT, {"text": answer})
    _message_insert(run, role="assistant", content=answer, in_memory=True)
    run.status, run.final_answer, run.stop_reason = Run.Status.COMPLETED, answer, stop_reason
    _save(run, "status", "final_answer", "stop_reason", "state", "iterations")
    recorder.emit(RunEvent.Type.DONE, {"status": run.status})
    return RunOutcome(run)


def _fail(run: Run, recorder: EventRecorder, code: str, message: str) -> None:
    """End the run FAILED with `code`: its ERROR and DONE events, the run's row and the
    cancellation of its open requests, one step."""
    with _Step(recorder):
        _fail_step(run, recorder, code, message)


def _fail_step(run: Run, recorder: EventRecorder, code: str, message: str) -> None:
    recorder.emit(RunEvent.Type.ERROR, {"code": code, "message": message[:500]})
    run.status, run.error_code, run.error_message = Run.Status.FAILED, code, message[:500]
    _save(run, "status", "error_code", "error_message", "state", "iterations")
    # The run's row is locked before its requests (the order run_cancel and a consumption take
    # them in: no deadlock between them); its held save is written with the step's end.
    _lock_held(run, "it was not failed by this process")
    # No request is left open (or CONFIRMED) on a finished run: each ends CANCELLED with the reason.
    cancellation.confirmations_cancel_for_run(run_id=run.pk, actor_id=None, reason=f"the run ended: {code}")
    recorder.emit(RunEvent.Type.DONE, {"status": run.status})


def _unparseable(arguments: Any) -> bool:
    try:
        return not isinstance(loads_json(arguments), dict)
    except (TypeError, ValueError):
        return True


def _refuse_turn(run: Run, ctx: ToolContext, turn: ModelTurn, manager: ToolCallingManager,
                 recorder: EventRecorder) -> bool:
    """Refuse a whole turn that was cut short (finish_reason length/content_filter), carries a call
    with unparseable arguments, or makes more than AGENT_MAX_TOOL_CALLS_PER_TURN calls: nothing in
    it executes, and every call id is told why (issue 2 item 9; DESIGN section 9: execute only after
    a complete model turn). Returns True when refused."""
    limit = settings.AGENT_MAX_TOOL_CALLS_PER_TURN
    too_many = turn.complete and len(turn.tool_calls) > limit
    bad = {c.id for c in turn.tool_calls if _unparseable(c.arguments)} if turn.complete and not too_many else set()
    if turn.complete and not bad and not too_many:
        return False
    code = "TURN_INCOMPLETE"
    if too_many:
        code = "TOO_MANY_TOOL_CALLS"
        why = f"your reply made {len(turn.tool_calls)} tool calls, more than the {limit} one turn may make"
    elif bad:
        # The broken calls go through the pipeline, which rejects them at step 2 (and audits them).
        for message in manager.execute_tool_calls(ctx, turn.assistant_message(), on_event=recorder.emit,
                                                  only=bad).tool_messages:
            _append(run, message)
        why = "another call in the same turn had unparseable arguments"
    else:
        why = f"your reply was cut off (finish_reason={turn.finish_reason})"
    again = f"make at most {limit} calls" if too_many else "send complete tool calls again"
    result = ToolResult.failure(code, f"{why}; no tool was executed; {again}", retryable=True, terminal=False)
    for call in turn.tool_calls:
        if call.id in bad:
            continue
        audit.tool_call_invalid(tenant_id=ctx.tenant_id, actor_id=ctx.user_id, tool_name=call.name[:100],
                     status=result.code, request_id=ctx.request_id, conversation_id=ctx.conversation_id,
                     run_id=ctx.run_id, tool_call_id=call.id, message=result.message)
        _append(run, {"role": "tool", "tool_call_id": call.id, "content": result.to_json()})
    return True


def _advance(run: Run, ctx: ToolContext, recorder: EventRecorder, manager: ToolCallingManager, *,
             park: bool = False) -> RunOutcome:
    fresh = getattr(run, "_fresh_conversation", False)
    waiting = [] if fresh else llm_pending.waiting_calls(conversation_id=run.conversation_id)
    system = [{"role": "system", "content": SYSTEM_PROMPT + llm_pending.system_note(waiting)}]
    memory = [] if fresh else memory_messages(conversation=run.conversation, exclude_run=run)
    # What approvers see of the conversation, from the messages already in hand (no query).
    ctx = replace(ctx, conversation_excerpt=lambda: _excerpt(memory, run.state["messages"]))
    try:
        definitions, ctx = manager.resolve(ctx)
        internal = run.state.get("internal", True)
        first = True
        while run.iterations < settings.AGENT_MAX_ITERATIONS:
            if not first:
                # Permissions, whitelist and risk are checked again before every model call of a
                # run, not once per run (one query): a grant revoked meanwhile takes effect now.
                definitions, ctx = manager.resolve(ctx, refresh=True)
            first = False
            _admission(run)
            release_connection_while_waiting()  # no pooled connection held through the model call
            turn = complete_in_window(system=system, memory=memory, messages=run.state["messages"],
                                      tools=definitions, on_text=recorder.text)
            # The rest of the streamed text is stored with the step that follows (its first
            # event flushes it, in order), not in a statement and a commit of its own.
            run.iterations += 1
            if not turn.has_tool_calls:
                return _finish(run, recorder, turn.content, stop_reason=turn.finish_reason, waiting=waiting)
            # One step: the assistant's turn, its tool calls (confirmation requests or executions
            # with their audit rows), the tool messages, events and the run's state.
            with _Step(recorder):
                assistant = turn.assistant_message()
                _append(run, assistant)
                if turn.complete and not is_eligible(internal, turn):
                    # User-controlled execution (seed 000 section 5.3): hand the calls to the caller.
                    # Never those of a turn cut short (length, a filter): they are refused below,
                    # as in internal execution, and the model is asked again.
                    run.status, run.stop_reason = Run.Status.COMPLETED, "tool_calls"
                    _save(run, "status", "stop_reason", "state", "iterations")
                    recorder.emit(RunEvent.Type.DONE, {"status": run.status, "tool_calls": assistant["tool_calls"]})
                    return RunOutcome(run, tool_calls=assistant["tool_calls"])
                if _refuse_turn(run, ctx, turn, manager, recorder):
                    _save(run, "state", "iterations")
                    if run.iterations < settings.AGENT_MAX_ITERATIONS:
                        _admit_in_step(run)
                    continue
                result = manager.execute_tool_calls(ctx, assistant, on_event=recorder.emit)
                for message in result.tool_messages:
                    _append(run, message)
                if result.must_wait:
                    run.state["pending"] = result.pending_calls
                    run.state["assistant_index"] = len(run.state["messages"]) - 1 - len(result.tool_messages)
                    run.status = Run.Status.AWAITING_CONFIRMATION
                    _save(run, "status", "state", "iterations")
                    return RunOutcome(run, pending=result.pending)
                _save(run, "state", "iterations")
                if not result.return_direct and run.iterations < settings.AGENT_MAX_ITERATIONS:
                    _admit_in_step(run)
            if result.return_direct:
                answer = "\n".join(o.result.to_json() for o in result.outcomes)
                return _finish(run, recorder, answer, stop_reason="return_direct")
        _fail(run, recorder, "MAX_ITERATIONS", f"the agent stopped after {settings.AGENT_MAX_ITERATIONS} model calls")
        return RunOutcome(run)
    except ModelError as error:
        if park and error.retryable:
            # Keep what this run did so far; a retry of the task continues from here.
            _save(run, "state", "iterations", park=True)
            raise RunParked(str(error)) from error
        _fail(run, recorder, error.code, error.message)
        return RunOutcome(run)
    except DomainError as error:
        _fail(run, recorder, error.code, error.message)
        raise
    except RunClaimLost:
        raise
    except Exception as error:  # DESIGN step 9: an error propagated to the caller ends the run too
        _fail(run, recorder, "SYSTEM_ERROR", f"the run stopped on {type(error).__name__}")
        raise
