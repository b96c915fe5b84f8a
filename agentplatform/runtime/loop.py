"""The agent loop (DESIGN section 5): call the model with memory and the offered tools, run every
proposed call through the ToolCallingManager, suspend on gated calls, resume after decisions.

No database transaction is held across a model call; each state change is saved on its own.
"""
from __future__ import annotations

import datetime
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from django.conf import settings
from django.db import transaction

from agentplatform import clock
from agentplatform.errors import DomainError
from agentplatform.llm import client as llm
from agentplatform.llm.types import ModelTurn, ModelUnavailable
from agentplatform.runtime.eligibility import is_eligible
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from agentplatform.runtime.selectors import conversation_excerpt, memory_messages
from approvals.models import ConfirmationRequest
from audit import events as audit
from audit import metrics
from tools.context import ToolContext
from tools.manager import PendingConfirmation, ToolCallingManager, parse_tool_calls
from tools.results import ToolResult

SYSTEM_PROMPT = (
    "You are an enterprise business agent. Rules: 1. Inventory, orders and live status must come from tools, "
    "never guessed. 2. When a tool returns CONFIRMATION_REQUIRED, show the user what must be confirmed. "
    "3. Do not retry a high-risk tool before it is confirmed. 4. When a tool fails, state the error exactly; "
    "never pretend it succeeded. 5. Never ask the user for a tenant id, permissions or system tokens. "
    "6. REJECTED means a human refused the action; CONFIRMATION_EXPIRED means nobody decided in time."
)  # seed 002 section 22, plus rule 6 (DESIGN section 9: keep rejected and expired distinct)

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


def build_tool_context(run: Run, *, confirmations: dict[str, uuid.UUID] | None = None) -> ToolContext:
    """The server-side ToolContext of a run: identity from the run's row, never from model output."""
    return ToolContext(
        tenant=run.tenant, user=run.user, conversation_id=run.conversation_id, run_id=run.id,
        request_id=run.request_id, confirmations=dict(confirmations or {}),
        conversation_excerpt=conversation_excerpt(conversation=run.conversation),
    )


def _lease() -> datetime.datetime:
    return clock.now() + datetime.timedelta(seconds=settings.AGENT_RUN_LEASE_SECONDS)


def _save(run: Run, *fields: str) -> None:
    run.lease_expires_at = _lease() if run.status == Run.Status.RUNNING else None
    run.save(update_fields=[*fields, "lease_expires_at", "updated_at"])


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
    with transaction.atomic():
        run = Run.objects.create(tenant_id=user.tenant_id, user=user, conversation=conversation,
                                 request_id=request_id[:64] or uuid.uuid4().hex, lease_expires_at=_lease(),
                                 state={"messages": [{"role": "user", "content": message}]})
        Message.objects.create(conversation=conversation, run=run, role="user", content=message)
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=clock.now())
    if internal_tool_execution is None:
        internal_tool_execution = settings.AGENT_INTERNAL_TOOL_EXECUTION
    run.state["internal"] = internal_tool_execution
    recorder = EventRecorder(run, listener)
    return _advance(run, build_tool_context(run), recorder, manager or ToolCallingManager())


def _claim(run_id) -> Run | None:
    """Take an AWAITING_CONFIRMATION run whose every pending call is decided (compare-and-set)."""
    run = Run.objects.select_related("tenant", "user", "conversation").filter(pk=run_id).first()
    if run is None or run.status != Run.Status.AWAITING_CONFIRMATION:
        return None
    pending = run.state.get("pending") or {}
    open_ids = ConfirmationRequest.objects.filter(pk__in=list(pending.values()),
                                                  status=ConfirmationRequest.Status.PENDING)
    if open_ids.filter(expires_at__gt=clock.now()).exists():
        return None  # the model is not called again until every pending call is decided
    claimed = Run.objects.filter(pk=run.pk, status=Run.Status.AWAITING_CONFIRMATION).update(
        status=Run.Status.RUNNING, lease_expires_at=_lease(), updated_at=clock.now())
    if claimed != 1:
        return None
    run.status = Run.Status.RUNNING
    return run


def run_resume(*, run_id, listener: Listener | None = None, manager: ToolCallingManager | None = None) -> RunOutcome | None:
    """Resume a suspended run once every pending call is decided (DESIGN section 5.4).

    Idempotent: returns None when the run is unknown, not waiting, still waiting for a decision,
    or claimed by another resumer. Confirmed calls execute by consuming their confirmation (stored
    name and arguments, re-checked policy); cancelled ones answer REJECTED, expired ones
    CONFIRMATION_EXPIRED. Then the loop continues.
    """
    run = _claim(run_id)
    if run is None:
        return None
    manager = manager or ToolCallingManager()
    recorder = EventRecorder(run, listener)
    pending: dict[str, str] = run.state.get("pending") or {}
    requests = {str(r.pk): r for r in ConfirmationRequest.objects.filter(pk__in=list(pending.values()))}
    assistant = run.state["messages"][run.state["assistant_index"]]
    confirmed = {call_id: uuid.UUID(cid) for call_id, cid in pending.items()
                 if requests[cid].status in (ConfirmationRequest.Status.CONFIRMED, ConfirmationRequest.Status.CONSUMED)}
    ctx = build_tool_context(run, confirmations=confirmed)
    try:
        executed = manager.execute_tool_calls(ctx, assistant, on_event=recorder.emit, only=set(confirmed)) \
            if confirmed else None
    except DomainError as error:
        _fail(run, recorder, error.code, error.message)
        raise
    answers = {o.call.id: o.tool_message() for o in executed.outcomes} if executed else {}
    for call_id, cid in pending.items():
        if call_id in answers:
            continue
        request = requests[cid]
        if request.status == ConfirmationRequest.Status.CANCELLED:
            result = ToolResult.failure("REJECTED", f"the request was rejected by a human: {request.summary}")
        else:
            result = ToolResult.failure("CONFIRMATION_EXPIRED",
                                        f"nobody confirmed in time; nothing was done: {request.summary}")
        recorder.emit(RunEvent.Type.TOOL_EXECUTION_COMPLETED, {"tool_call_id": call_id, "tool": request.tool_name,
                                                               "success": False, "code": result.code})
        answers[call_id] = {"role": "tool", "tool_call_id": call_id, "content": result.to_json()}
    # Answer every waiting call id exactly once, in the model's order.
    for call in parse_tool_calls(assistant):
        if call.id in answers:
            _append(run, answers[call.id])
    run.state["pending"] = {}
    _save(run, "status", "state")
    return _advance(run, ctx.with_confirmations({}), recorder, manager)


def _append(run: Run, message: dict[str, Any]) -> None:
    run.state.setdefault("messages", []).append(message)
    if message["role"] in ("assistant", "tool"):
        Message.objects.create(conversation_id=run.conversation_id, run=run, role=message["role"],
                               content=message.get("content") or "", tool_calls=message.get("tool_calls"),
                               tool_call_id=message.get("tool_call_id", ""),
                               in_memory=settings.AGENT_MEMORY_FULL_TOOL_TRACE)


def _finish(run: Run, recorder: EventRecorder, answer: str, *, stop_reason: str = "stop") -> RunOutcome:
    recorder.emit(RunEvent.Type.FINAL_TEXT, {"text": answer})
    Message.objects.create(conversation_id=run.conversation_id, run=run, role="assistant", content=answer,
                           in_memory=True)
    run.status, run.final_answer, run.stop_reason = Run.Status.COMPLETED, answer, stop_reason
    _save(run, "status", "final_answer", "stop_reason", "state", "iterations")
    recorder.emit(RunEvent.Type.DONE, {"status": run.status})
    metrics.LOOP_ITERATIONS.observe(run.iterations)
    return RunOutcome(run)


def _fail(run: Run, recorder: EventRecorder, code: str, message: str) -> None:
    recorder.emit(RunEvent.Type.ERROR, {"code": code, "message": message[:500]})
    run.status, run.error_code, run.error_message = Run.Status.FAILED, code, message[:500]
    _save(run, "status", "error_code", "error_message", "state", "iterations")
    recorder.emit(RunEvent.Type.DONE, {"status": run.status})


def _unparseable(arguments: Any) -> bool:
    try:
        return not isinstance(json.loads(arguments), dict)
    except (TypeError, ValueError):
        return True


def _refuse_turn(run: Run, ctx: ToolContext, turn: ModelTurn, manager: ToolCallingManager,
                 recorder: EventRecorder) -> bool:
    """Refuse a whole turn that was cut short (finish_reason length/content_filter) or carries a call
    with unparseable arguments: nothing in it executes, and every call id is told why (issue 2 item
    9; DESIGN section 9: execute only after a complete model turn). Returns True when refused."""
    bad = {c.id for c in turn.tool_calls if _unparseable(c.arguments)} if turn.complete else set()
    if turn.complete and not bad:
        return False
    if bad:
        # The broken calls go through the pipeline, which rejects them at step 2 (and audits them).
        for message in manager.execute_tool_calls(ctx, turn.assistant_message(), on_event=recorder.emit,
                                                  only=bad).tool_messages:
            _append(run, message)
        why = "another call in the same turn had unparseable arguments"
    else:
        why = f"your reply was cut off (finish_reason={turn.finish_reason})"
    result = ToolResult.failure("TURN_INCOMPLETE", f"{why}; no tool was executed; send complete tool calls again",
                                retryable=True, terminal=False)
    for call in turn.tool_calls:
        if call.id in bad:
            continue
        audit.record(tenant_id=ctx.tenant_id, actor_id=ctx.user_id, decision="INVALID", tool_name=call.name[:100],
                     status=result.code, request_id=ctx.request_id, conversation_id=ctx.conversation_id,
                     run_id=ctx.run_id, tool_call_id=call.id, message=result.message)
        _append(run, {"role": "tool", "tool_call_id": call.id, "content": result.to_json()})
    return True


def _advance(run: Run, ctx: ToolContext, recorder: EventRecorder, manager: ToolCallingManager) -> RunOutcome:
    memory = [{"role": "system", "content": SYSTEM_PROMPT}, *memory_messages(conversation=run.conversation,
                                                                             exclude_run=run)]
    try:
        definitions = manager.resolve_definitions(ctx)
        ctx = ctx.with_offered(frozenset(d["function"]["name"] for d in definitions))
        internal = run.state.get("internal", True)
        while run.iterations < settings.AGENT_MAX_ITERATIONS:
            turn = llm.complete(messages=[*memory, *run.state["messages"]], tools=definitions,
                                on_text=recorder.text)
            recorder.flush_text()
            run.iterations += 1
            if not turn.has_tool_calls:
                return _finish(run, recorder, turn.content, stop_reason=turn.finish_reason)
            assistant = turn.assistant_message()
            _append(run, assistant)
            if not is_eligible(internal, turn):
                # User-controlled execution (seed 000 section 5.3): hand the calls to the caller.
                run.status, run.stop_reason = Run.Status.COMPLETED, "tool_calls"
                _save(run, "status", "stop_reason", "state", "iterations")
                recorder.emit(RunEvent.Type.DONE, {"status": run.status, "tool_calls": assistant["tool_calls"]})
                return RunOutcome(run, tool_calls=assistant["tool_calls"])
            if _refuse_turn(run, ctx, turn, manager, recorder):
                _save(run, "state", "iterations")
                continue
            result = manager.execute_tool_calls(ctx, assistant, on_event=recorder.emit)
            for message in result.tool_messages:
                _append(run, message)
            if result.must_wait:
                run.state["pending"] = {p.tool_call_id: p.confirmation_id for p in result.pending}
                run.state["assistant_index"] = len(run.state["messages"]) - 1 - len(result.tool_messages)
                run.status = Run.Status.AWAITING_CONFIRMATION
                _save(run, "status", "state", "iterations")
                return RunOutcome(run, pending=result.pending)
            _save(run, "state", "iterations")
            if result.return_direct:
                answer = "\n".join(o.result.to_json() for o in result.outcomes)
                return _finish(run, recorder, answer, stop_reason="return_direct")
        _fail(run, recorder, "MAX_ITERATIONS", f"the agent stopped after {settings.AGENT_MAX_ITERATIONS} model calls")
        return RunOutcome(run)
    except ModelUnavailable as error:
        _fail(run, recorder, ModelUnavailable.code, str(error))
        return RunOutcome(run)
    except DomainError as error:
        _fail(run, recorder, error.code, error.message)
        raise
