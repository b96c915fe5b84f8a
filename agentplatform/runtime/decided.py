"""Answering a resumed run's pending calls once they are decided: the confirmed ones execute by
consuming their confirmation, the others are told what was decided (answers.ANSWERS). One step."""
from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from core import clock
from core.errors import DomainError
from agentplatform.runtime import answers, ending
from agentplatform.runtime.context import build_tool_context
from agentplatform.runtime.leases import RunClaimLost
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.step import HeldRun, Step
from approvals import expiry
from approvals.models import ConfirmationRequest
from tools.context import ToolContext
from tools.calls import parse_tool_calls
from tools.manager import ToolCallingManager


def answer_pending(held: HeldRun, manager: ToolCallingManager,
                   requests: dict[str, ConfirmationRequest] | None = None) -> tuple[ToolContext, list]:
    """Execute the confirmed pending calls, answer the others truthfully (REJECTED with who and
    why, CONFIRMATION_EXPIRED, SUPERSEDED, or the refusal code), append one tool message per
    answered call id. Returns (context, calls still waiting): a call whose policy became stricter
    since its decision waits again (the run goes back to AWAITING_CONFIRMATION). One step: the
    consumption, its business change, audit rows, tool messages, events and the run's state
    commit together.

    requests: the pending calls' confirmation requests by id, when the claim already read them.
    A DomainError or any other error ends the run (FAILED) and propagates; RunClaimLost propagates.
    """
    try:
        with Step.begin(held) as step:
            return _answer(step, manager, requests)
    except DomainError as error:
        ending.fail(held, error.code, error.message)
        raise
    except RunClaimLost:
        raise
    except Exception as error:  # an error propagated to the caller ends the run too
        ending.fail(held, "SYSTEM_ERROR", f"the run stopped on {type(error).__name__}")
        raise


def _answer(step: Step, manager: ToolCallingManager,
            requests: dict[str, ConfirmationRequest] | None) -> tuple[ToolContext, list]:
    run = step.held.run
    pending: dict[str, str] = run.state.get("pending") or {}
    ids = set(pending.values())
    if requests is None or not ids <= set(requests):
        requests = {str(r.pk): r for r in ConfirmationRequest.objects.filter(pk__in=list(ids))}
    assistant = run.state["messages"][run.state["assistant_index"]]
    runnable = (ConfirmationRequest.Status.CONFIRMED, ConfirmationRequest.Status.CONSUMED)
    confirmed = {call_id: uuid.UUID(cid) for call_id, cid in pending.items() if requests[cid].status in runnable}
    ctx = build_tool_context(run, confirmations=confirmed, held=step.held)
    # An approver's edit replaced a call's arguments: the stored, edited binding is what runs (the
    # server's record is the truth, not the model's message), and the model is told what changed.
    edited = {call_id: requests[pending[call_id]] for call_id in confirmed
              if requests[pending[call_id]].revision > 0}
    edits = {call_id: answers.edits_of(request) for call_id, request in edited.items()}

    def emit(kind: str, payload: dict[str, Any]) -> None:
        # The requester's event of an edited call says who changed what.
        if kind == RunEvent.Type.TOOL_EXECUTION_COMPLETED and payload.get("tool_call_id") in edits:
            payload = {**payload, **edits[payload["tool_call_id"]]}
        step.emit(kind, payload)

    executed = manager.execute_tool_calls(ctx, answers.with_edits(assistant, edited), on_event=emit,
                                          only=set(confirmed)) if confirmed else None
    told: dict[str, dict[str, Any]] = {}
    waiting = []
    for outcome in executed.outcomes if executed else []:
        if outcome.pending is not None:
            waiting.append(outcome.pending)
        elif outcome.call.id in edited:
            told[outcome.call.id] = answers.edited_answer(outcome, edits[outcome.call.id])
        else:
            told[outcome.call.id] = outcome.tool_message()
    undecided = []
    for call_id, cid in pending.items():
        if call_id in told or call_id in confirmed:
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
        result, payload = answers.decision_answer(request)
        payload["tool_call_id"] = call_id
        step.emit(RunEvent.Type.TOOL_EXECUTION_COMPLETED, payload)
        told[call_id] = {"role": "tool", "tool_call_id": call_id, "content": result.to_json()}
    # Answer every decided call id exactly once, in the model's order.
    for call in parse_tool_calls(assistant):
        if call.id in told:
            step.append(told[call.id])
    still = {p.tool_call_id: p.confirmation_id for p in waiting}
    still.update({call_id: pending[call_id] for call_id in undecided})
    run.state["pending"] = still
    if still:
        run.status = Run.Status.AWAITING_CONFIRMATION
    step.save_run("status", "state")
    if not still and run.iterations < settings.AGENT_MAX_ITERATIONS:
        step.admit_next_call()  # the model is called next
    if executed is not None and executed.offered is not None:
        # Consuming re-queried the offered tools just now (permissions, tenant policy, risk are
        # re-checked at consume time); the rest of this run is offered the same set.
        ctx = replace(ctx, confirmations={}, offered=frozenset(executed.offered), offered_tools=executed.offered)
    else:
        ctx = ctx.with_confirmations({})
    return ctx, waiting
