"""MCP calls approvers decide (agentplatform.mcp_server.calls, service level): a CRITICAL call
waits for two distinct approvers deciding through the approvals services, the client's retries
see the quorum fill and the first retry after it runs the call once; a rejection, an expiry or a
withdrawal answers a failure with its reason; the requester alone never satisfies the quorum."""
from __future__ import annotations

import datetime
import uuid

import pytest

from agentplatform.mcp_server import calls
from agentplatform.mcp_server.models import McpCall
from approvals import amendments, approver_actions, requester_actions
from approvals.errors import ApprovalForbidden
from approvals.models import ConfirmationRequest
from core import clock
from tests.mcp_server.calls_support import (  # noqa: F401 - fixtures
    CRITICAL,
    REFUND_ARGS,
    REFUND_ORDER,
    caller,
    code,
    rows_of,
)
from tools.catalog.models import Refund


def _request(answer) -> ConfirmationRequest:
    return ConfirmationRequest.objects.get(pk=uuid.UUID(answer.pending["request_id"]))


def test_two_approvers_then_a_retry_runs_the_refund_once(caller, approver1, approver2):
    first = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)
    assert first.state == "pending" and not first.waits_on_requester
    assert first.pending["needs"] == "approvers" and first.pending["quorum"] == 2 and first.pending["approvals"] == 0
    assert first.pending["risk"] == "CRITICAL"
    request = _request(first)

    approver_actions.confirmation_approve(request_id=request.pk, approver=approver1)
    halfway = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)
    assert halfway.state == "pending" and halfway.pending["approvals"] == 1 and halfway.call_id == first.call_id
    assert Refund.objects.count() == 0

    approver_actions.confirmation_approve(request_id=request.pk, approver=approver2)
    assert Refund.objects.count() == 0  # nothing runs until the client asks again (no run to resume)
    ran = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)

    assert ran.state == "completed" and not ran.replayed and ran.result["success"] is True
    assert Refund.objects.count() == 1
    for again in (calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS),
                  calls.call_state(caller, call_id=first.call_id)):
        assert again.state == "completed" and again.replayed and again.result["data"] == ran.result["data"]
    assert Refund.objects.count() == 1 and ConfirmationRequest.objects.count() == 1
    assert McpCall.objects.get().status == McpCall.Status.COMPLETED
    executed = [r for r in rows_of(McpCall.objects.get().tool_call_id) if r.decision == "EXECUTED"]
    assert len(executed) == 1 and executed[0].channel["name"] == "mcp"


def test_the_requester_alone_never_satisfies_the_quorum(caller, requester, approver1):
    first = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)
    request = _request(first)

    with pytest.raises(ApprovalForbidden):
        approver_actions.confirmation_approve(request_id=request.pk, approver=requester)
    # the requester's own "confirm" (an elicitation form) is not an approval either
    told = calls.requester_answer(caller, call_id=first.call_id, confirm=True)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver1)
    still = calls.call_state(caller, call_id=first.call_id)

    assert told.state == "pending" and told.pending["approvals"] == 0
    assert still.state == "pending" and still.pending["approvals"] == 1
    assert Refund.objects.count() == 0 and ConfirmationRequest.objects.get(pk=request.pk).status == "PENDING"


def test_a_rejection_fails_with_the_approvers_reason(caller, approver1):
    first = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)

    approver_actions.confirmation_reject(request_id=_request(first).pk, approver=approver1,
                                         reason="the customer already got a voucher")
    answer = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)

    assert answer.state == "failed" and code(answer) == "REJECTED" and not answer.replayed
    assert "the customer already got a voucher" in answer.result["message"]
    assert answer.result["data"]["decided_by"]["username"] == approver1.username
    assert McpCall.objects.get().status == McpCall.Status.FAILED
    replay = calls.call_state(caller, call_id=first.call_id)
    assert replay.replayed and code(replay) == "REJECTED" and Refund.objects.count() == 0


def test_an_expired_request_fails_as_expired(caller, monkeypatch):
    first = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)
    request = _request(first)
    later = request.expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)

    answer = calls.call_state(caller, call_id=first.call_id)

    assert answer.state == "failed" and code(answer) == "CONFIRMATION_EXPIRED"
    assert ConfirmationRequest.objects.get(pk=request.pk).status == "EXPIRED"
    assert Refund.objects.count() == 0


def test_a_withdrawn_request_fails_as_withdrawn(caller, requester):
    first = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)

    requester_actions.confirmation_withdraw(request_id=_request(first).pk, requester=requester,
                                            reason="asked the wrong order")
    answer = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)

    assert answer.state == "failed" and code(answer) == "WITHDRAWN" and Refund.objects.count() == 0
    assert answer.result["data"]["reason"] == "asked the wrong order"


def test_an_approvers_edit_runs_and_is_told(caller, approver1, approver2):
    first = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)
    request = _request(first)
    amendments.confirmation_edit(request_id=request.pk, editor=approver1,
                                 arguments={**REFUND_ARGS, "amount": "5"}, base_arguments_hash=request.arguments_hash)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver2,
                                          arguments_hash=ConfirmationRequest.objects.get(pk=request.pk).arguments_hash)

    ran = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)  # the client retries what it asked

    assert ran.state == "completed" and ran.edited is not None
    assert ran.edited["edited_by"] == [approver1.username]
    assert [c["field"] for c in ran.edited["changes"]] == ["amount"]
    [refund] = Refund.objects.all()
    assert refund.order.order_id == REFUND_ORDER and str(refund.amount) in ("5", "5.00")
    replay = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)
    assert replay.replayed and replay.edited == ran.edited and Refund.objects.count() == 1


def test_a_confirmed_call_the_policy_now_sends_to_approvers_waits_for_them(caller, approver1, approver2):
    from tests.mcp_server.calls_support import CANCEL_ARGS, HIGH
    from tools.catalog.models import Cancellation
    from tools.levels import RiskLevel
    from tools.models import Tool

    # given: a HIGH call waiting for its requester, made CRITICAL before it runs
    first = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    Tool.objects.filter(name=HIGH).update(risk_override=RiskLevel.CRITICAL)

    # when: the requester confirms
    told = calls.requester_answer(caller, call_id=first.call_id, confirm=True)

    # then: nothing ran; the same request waits for approvers, and runs once they approve
    assert told.state == "pending" and told.pending["needs"] == "approvers" and told.pending["quorum"] == 2
    assert told.pending["request_id"] == first.pending["request_id"] and Cancellation.objects.count() == 0
    for approver in (approver1, approver2):
        approver_actions.confirmation_approve(request_id=_request(first).pk, approver=approver)
    ran = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    assert ran.state == "completed" and Cancellation.objects.count() == 1
