"""What the model is told about a pending call that was decided: one answer per final status of
its confirmation request, and the note on an approver's edit of a call that ran."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable

from agentplatform.runtime.cards import display_name
from approvals import presentation
from approvals.amendments import describe_changes
from approvals.models import Approval, ConfirmationRequest
from core.redaction.fields import mask_value
from policies.kill_switch import stopped_message
from tools.results import ToolResult

Status = ConfirmationRequest.Status


def _cancelled(request: ConfirmationRequest, decider: dict | None, reason: str) -> ToolResult:
    if request.outcome_code == "TOOL_STOPPED":  # a kill switch (policies.kill_switch)
        return ToolResult.failure("TOOL_STOPPED", f"{stopped_message(request.tool_name, reason)} (request: {request.summary})",
                                  data={"decided_by": decider, "reason": reason or None})
    if decider and decider["role"] == "approver":
        message = f"an approver ({decider['username']}) rejected the request: {reason or 'no reason given'}"
    elif decider:
        message = "the requester declined the request"
    else:
        message = f"the request was cancelled: {reason or 'no reason given'}"
    return ToolResult.failure("REJECTED", f"{message}; nothing was done: {request.summary}",
                              data={"decided_by": decider, "reason": reason or None})


def _superseded(request: ConfirmationRequest, decider: dict | None, reason: str) -> ToolResult:
    return ToolResult.failure("SUPERSEDED", f"a newer request for the same action replaced this one; nothing "
                                            f"was done here: {request.summary}", data={"reason": reason or None})


def _responded(request: ConfirmationRequest, decider: dict | None, reason: str) -> ToolResult:
    # Guidance, not a decision. Not a success (nothing ran) and not a rejection (the action is
    # not refused): the model re-plans with it.
    who = decider["username"] if decider else "an approver"
    return ToolResult.failure(
        "APPROVER_GUIDANCE",
        f"an approver ({who}) did not run this call and answered with guidance instead; nothing was done "
        f"and the request is closed. Guidance: \"{reason}\". Follow it: change the plan or ask the user; "
        f"a changed call needs a new request.", retryable=True, terminal=False,
        data={"responded_by": decider, "guidance": reason or None})


def _withdrawn(request: ConfirmationRequest, decider: dict | None, reason: str) -> ToolResult:
    return ToolResult.failure("WITHDRAWN", f"the requester withdrew the request; nothing was done: "
                                           f"{request.summary}", data={"decided_by": decider,
                                                                       "reason": reason or None})


def _refused(request: ConfirmationRequest, decider: dict | None, reason: str) -> ToolResult:
    code = request.outcome_code or "REFUSED"
    return ToolResult.failure(code, f"refused when it was about to run: {reason}; nothing was done",
                              data={"reason": reason or None})


def _expired(request: ConfirmationRequest, decider: dict | None, reason: str) -> ToolResult:
    return ToolResult.failure("CONFIRMATION_EXPIRED", f"nobody confirmed in time; nothing was done: {request.summary}")


# The answer for each final status of a request that did not execute; any other status (EXPIRED)
# is answered as expired.
ANSWERS: dict[str, Callable[[ConfirmationRequest, dict | None, str], ToolResult]] = {
    Status.CANCELLED: _cancelled,
    Status.SUPERSEDED: _superseded,
    Status.RESPONDED: _responded,
    Status.WITHDRAWN: _withdrawn,
    Status.REFUSED: _refused,
}


def decision_answer(request: ConfirmationRequest) -> tuple[ToolResult, dict[str, Any]]:
    """What the model is told about a call whose request ended without executing, and the event
    payload for the requester: who decided, what, and why. Reasons are masked.

    Returns (the tool result, the TOOL_EXECUTION_COMPLETED payload)."""
    reason = mask_value("reason", request.decision_reason or "")
    decider = presentation.decider(request)
    if decider is not None:  # the name people know them by, beside the username
        decider = {**decider, "name": display_name(request.decided_by)}
    result = ANSWERS.get(request.status, _expired)(request, decider, reason)
    payload = {"tool_call_id": request.tool_call_id, "tool": request.tool_name, "success": False,
               "code": result.code, "confirmation_id": str(request.pk), "status": request.status,
               "decided_by": decider, "reason": reason or None}
    if request.status == Status.RESPONDED:
        payload["guidance"] = reason or None
    return result, payload


def with_edits(assistant: dict[str, Any], edited: dict[str, ConfirmationRequest]) -> dict[str, Any]:
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


def edits_of(request: ConfirmationRequest) -> dict[str, Any]:
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


def edited_answer(outcome, edit: dict[str, Any]) -> dict[str, Any]:
    """The tool message of a call an approver edited: who changed what, then the result, so the
    model knows the call ran with other arguments than it proposed."""
    result = replace(outcome.result, message=f"{edit['edit_note']}. {outcome.result.message}")
    return {"role": "tool", "tool_call_id": outcome.call.id, "content": result.to_json()}
