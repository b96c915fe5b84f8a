"""What an MCP call answers (calls.Answer): a pipeline outcome as completed / failed, a waiting
request's pending facts, a request that ended without running (rejected, declined, expired,
withdrawn, superseded, refused) as the failure the model of our own loop is told
(agentplatform.runtime.answers.decision_answer: the same stable codes and reasons), and a stored
answer replayed. Reads only."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from agentplatform.mcp_server.models import McpCall
from agentplatform.mcp_server.values import Answer
from agentplatform.runtime import answers as run_answers
from approvals.models import Approval, ConfirmationRequest
from approvals.rules import COUNTED
from tools.calls import CallOutcome, needs_of
from tools.results import ToolResult

PENDING_CODE = "CONFIRMATION_REQUIRED"


def _answer(state: str, result: dict[str, Any], **extra: Any) -> Answer:
    return Answer(state=state, result=result, **extra)


def request_url(request_id: Any) -> str:
    """The absolute URL of the requester's page of request `request_id`
    (`approvals:mine-detail`), or of "my requests" (`approvals:mine`) where that page is not
    installed; PLATFORM_BASE_URL in front."""
    try:
        path = reverse("approvals:mine-detail", kwargs={"request_id": request_id})
    except NoReverseMatch:
        path = reverse("approvals:mine")
    return f"{settings.PLATFORM_BASE_URL}{path}"


def approvals_so_far(request: ConfirmationRequest) -> int:
    """How many approvals count toward `request`'s quorum so far: APPROVE and EDIT decisions on
    its current revision (0 for a requester-confirmed request). One query."""
    if request.policy != ConfirmationRequest.Policy.APPROVERS:
        return 0
    return Approval.objects.filter(request_id=request.pk, revision=request.revision, decision__in=COUNTED).count()


def pending_facts(request: ConfirmationRequest) -> dict[str, Any]:
    """The pending facts of a waiting request: {"request_id", "needs" ("requester" | "approvers"),
    "quorum", "approvals" (so far), "expires_at" (ISO 8601), "url" (absolute), "summary" (masked
    when stored), "risk", "rules" (policy rule ids that set the gate)}."""
    return {"request_id": str(request.pk), "needs": needs_of(request.policy), "quorum": request.quorum,
            "approvals": approvals_so_far(request), "expires_at": request.expires_at.isoformat(),
            "url": request_url(request.pk), "summary": request.summary, "risk": request.risk,
            "rules": list(request.policy_rules or [])}


def pending(request: ConfirmationRequest, call: McpCall) -> Answer:
    """The pending Answer of `call`, waiting on `request`: `result` is a CONFIRMATION_REQUIRED
    failure envelope whose message says who decides, where, and to call again with the same
    arguments; `pending` the facts (`pending_facts`)."""
    facts = pending_facts(request)
    who = ("you (the requester) must confirm it" if facts["needs"] == "requester"
           else f"{facts['quorum']} approver(s) must approve it ({facts['approvals']} so far)")
    message = (f"waiting for a decision: {who} before {facts['expires_at']}; decide at {facts['url']}, then call "
               f"this tool again with the same arguments to get the result: {request.summary}")
    result = ToolResult.failure(PENDING_CODE, message, retryable=True, terminal=False, data=facts)
    return _answer("pending", result.to_dict(), pending=facts, call_id=call.pk)


def ended(request: ConfirmationRequest) -> ToolResult:
    """The failure of a request that ended without running: REJECTED (an approver's rejection with
    who and the reason, or the requester's decline), CONFIRMATION_EXPIRED, WITHDRAWN, SUPERSEDED,
    APPROVER_GUIDANCE, or the refusal's code; reasons masked. `request.decided_by` is read."""
    return run_answers.decision_answer(request)[0]


def edits(request: ConfirmationRequest | None) -> dict[str, Any] | None:
    """{"changes": [{"field", "from", "to"}] (masked), "edited_by": [usernames]} when approvers
    edited the arguments that ran, else None."""
    if request is None or not request.revision:
        return None
    edit = run_answers.edits_of(request)
    return {"changes": edit["changes"], "edited_by": edit["edited_by"]}


def of_outcome(outcome: CallOutcome, *, call: McpCall | None = None, edited: dict[str, Any] | None = None) -> Answer:
    """The Answer of a call that did not wait: "completed" when the tool ran and succeeded,
    "failed" otherwise (refused, invalid, the tool's business failure); the masked result."""
    result = outcome.result
    return _answer("completed" if result.success else "failed", result.to_dict(),
                   call_id=call.pk if call is not None else None, edited=edited)


def replay(call: McpCall, request: ConfirmationRequest | None = None) -> Answer:
    """The stored answer of a call that ended (COMPLETED or FAILED), replayed to a later retry:
    nothing runs again. `result` carries `"idempotent_replay": true`; Answer.replayed is True."""
    stored = dict(call.result or {})
    stored["idempotent_replay"] = True
    state = "completed" if call.status == McpCall.Status.COMPLETED else "failed"
    return _answer(state, stored, call_id=call.pk, edited=edits(request), replayed=True)


def refused(code: str, message: str) -> Answer:
    """A failed Answer for a call refused before the pipeline (the key's user can no longer call)."""
    return _answer("failed", ToolResult.failure(code, message).to_dict())
