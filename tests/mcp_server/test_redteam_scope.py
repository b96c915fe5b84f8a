"""Held attacks kept as tests: another tenant's key asking about a call (task id, session id) learns
nothing; the requester cannot approve their own CRITICAL call through the form path; the same call
retried with its arguments reordered or written differently ("50", "50.00", 50, 50.0) is one
request, and an extra field is refused, never a second request."""
from __future__ import annotations

import json

import pytest

from tests.mcp_server.conftest import INIT, RawSession, issue_key, raw_post

CRITICAL = "refund_order"
REFUND_ARGS = {"order_id": "A202607290003", "amount": "50", "reason": "the parcel arrived broken"}


def test_another_tenants_key_learns_nothing_of_a_call(mcp_live, requester, outsider):
    from agentplatform.mcp_server.models import McpCall

    key = issue_key(requester)
    mine = RawSession(mcp_live.url, key)
    task_id = mine.request("tools/call", {"name": CRITICAL, "arguments": REFUND_ARGS, "task": {}})["result"]["task"]["taskId"]
    theirs = RawSession(mcp_live.url, issue_key(outsider))
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        error = theirs.request(method, {"taskId": task_id})["error"]
        assert error == {"code": -32602, "message": "unknown task", "data": {"code": "TASK_NOT_FOUND"}}
    # the session id of another tenant's key is not theirs either
    other = raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                    "params": {"name": CRITICAL, "arguments": REFUND_ARGS}},
                     key=issue_key(outsider), headers=mine.headers)
    assert other.status_code == 404 and task_id not in other.text
    assert McpCall.objects.get(pk=task_id).status == McpCall.Status.WAITING
    assert raw_post(mcp_live.url, INIT, key=key).status_code == 200


@pytest.mark.django_db
def test_the_requester_cannot_approve_their_own_critical_call(requester, outsider):
    from agentplatform.mcp_server import calls
    from approvals.models import Approval, ConfirmationRequest
    from tests.mcp_server.calls_support import principal_of
    from tools.catalog.models import Refund

    principal, _ = principal_of(requester)
    pending = calls.call_tool(principal, name=CRITICAL, arguments=REFUND_ARGS)
    assert pending.state == "pending" and pending.pending["needs"] == "approvers"
    answered = calls.requester_answer(principal, call_id=pending.call_id, confirm=True)
    assert answered.state == "pending" and answered.pending["approvals"] == 0
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.PENDING
    assert Approval.objects.count() == 0 and Refund.objects.count() == 0
    stranger, _ = principal_of(outsider)
    with pytest.raises(calls.CallNotFound):
        calls.requester_answer(stranger, call_id=pending.call_id, confirm=True)
    with pytest.raises(calls.CallNotFound):
        calls.call_state(stranger, call_id=pending.call_id)


@pytest.mark.django_db
def test_rewritten_arguments_are_the_same_call_and_extra_fields_are_refused(requester):
    from agentplatform.mcp_server import calls
    from agentplatform.mcp_server.models import McpCall
    from approvals.models import ConfirmationRequest
    from tests.mcp_server.calls_support import principal_of

    principal, _ = principal_of(requester)
    first = calls.call_tool(principal, name=CRITICAL, arguments=REFUND_ARGS)
    variants = [dict(reversed(list(REFUND_ARGS.items()))), {**REFUND_ARGS, "amount": "50.00"},
                {**REFUND_ARGS, "amount": 50}, {**REFUND_ARGS, "amount": 50.0}, json.loads(json.dumps(REFUND_ARGS))]
    for arguments in variants:
        again = calls.call_tool(principal, name=CRITICAL, arguments=arguments)
        assert again.state == "pending" and again.call_id == first.call_id, arguments
    extra = calls.call_tool(principal, name=CRITICAL, arguments={**REFUND_ARGS, "approved": True})
    assert extra.state == "failed" and extra.result["code"] == "INVALID_ARGUMENTS"
    assert ConfirmationRequest.objects.count() == 1 and McpCall.objects.count() == 1
