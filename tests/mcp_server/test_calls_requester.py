"""MCP calls a requester decides (agentplatform.mcp_server.calls, service level): a LOW call runs
once with MCP named on its audit rows; a HIGH call waits for the requester, runs once when they
confirm, fails when they decline; retries never ask twice and never run twice."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm

from agentplatform.mcp_server import calls
from agentplatform.mcp_server.models import McpCall
from agentplatform.tenancy.models import User
from approvals.errors import ApprovalForbidden
from approvals.models import ConfirmationRequest
from tests.mcp_server.calls_support import (  # noqa: F401 - fixtures
    CANCEL_ARGS,
    HIGH,
    KEY_NAME,
    LOW,
    ORDER,
    caller,
    code,
    keyed,
    principal_of,
    rows_of,
    stored_text,
)
from tools.catalog.models import Cancellation, Order
from tools.models import Tool


def test_a_low_call_runs_once_and_its_audit_rows_name_mcp_and_the_key(people, keyed):
    principal, raw_key = keyed

    answer = calls.call_tool(principal, name=LOW, arguments={"status": "PAID"}, request_id="req-1")

    assert answer.state == "completed" and answer.result["success"] is True
    assert answer.result["data"]["items"] and all(o["status"] == "PAID" for o in answer.result["data"]["items"])
    assert answer.pending is None and answer.call_id is None and not answer.replayed
    assert not McpCall.objects.exists()  # only gated calls are recorded
    [row] = [r for r in rows_of_tool(LOW)]
    assert row.decision == "EXECUTED" and row.request_id == "req-1"
    assert row.channel == {"name": "mcp", "api_key": KEY_NAME, "api_key_id": str(principal.api_key.public_id),
                           "client": "test-client/1.0"}
    assert row.conversation_id == principal.conversation_id
    assert raw_key not in stored_text() and principal.api_key.digest not in stored_text()


def rows_of_tool(name: str):
    from audit.models import AuditEvent

    return list(AuditEvent.objects.filter(tool_name=name).exclude(decision="CONTROL_CHANGE"))


def test_a_high_call_waits_for_the_requester_then_runs_once_when_confirmed(caller):
    # given: the call waits for its requester
    answer = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    assert answer.state == "pending" and answer.waits_on_requester
    facts = answer.pending
    request = ConfirmationRequest.objects.get(pk=facts["request_id"])
    assert facts["needs"] == "requester" and facts["quorum"] == request.quorum and facts["approvals"] == 0
    assert facts["risk"] == "HIGH" and ORDER in facts["summary"] and facts["expires_at"] == request.expires_at.isoformat()
    assert facts["url"].startswith("http") and "/approvals/mine/" in facts["url"]
    mcp = McpCall.objects.get(pk=answer.call_id)
    assert mcp.status == McpCall.Status.WAITING and mcp.request_id == request.pk and mcp.key_name == KEY_NAME
    assert mcp.tool_call_id.startswith("mcp_") and request.tool_call_id == mcp.tool_call_id
    assert request.conversation_id == caller.conversation_id and request.run_id is None
    assert Cancellation.objects.count() == 0

    # when: the requester confirms (the elicitation form accepted)
    done = calls.requester_answer(caller, call_id=answer.call_id, confirm=True)

    # then: it ran once, and its rows say MCP
    assert done.state == "completed" and done.result["success"] is True and not done.replayed
    assert Cancellation.objects.count() == 1 and Order.objects.get(order_id=ORDER).status == "CANCELLED"
    mcp.refresh_from_db()
    assert mcp.status == McpCall.Status.COMPLETED and mcp.result["code"] == "OK"
    request.refresh_from_db()
    assert request.status == ConfirmationRequest.Status.CONSUMED
    rows = rows_of(mcp.tool_call_id)
    assert [r.decision for r in rows] == ["CONFIRMATION_REQUIRED", "CONFIRMED", "EXECUTED"]
    # the pipeline's rows (the call asked for, the call run) name MCP and the key
    assert all(r.channel["name"] == "mcp" and r.channel["api_key"] == KEY_NAME for r in rows if r.decision != "CONFIRMED")


def test_a_declined_call_fails_and_nothing_runs(caller):
    answer = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)

    declined = calls.requester_answer(caller, call_id=answer.call_id, confirm=False)

    assert declined.state == "failed" and code(declined) == "REJECTED"
    assert "declined" in declined.result["message"]
    assert ConfirmationRequest.objects.get(pk=answer.pending["request_id"]).status == "CANCELLED"
    assert Cancellation.objects.count() == 0
    # a retry is told the same, and asks nobody again
    again = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    assert again.state == "failed" and code(again) == "REJECTED" and again.replayed
    assert ConfirmationRequest.objects.count() == 1 and Cancellation.objects.count() == 0


def test_a_retry_before_the_decision_never_creates_a_second_request(caller):
    first = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    # the same arguments, keys in another order and spelled with extra whitespace in the JSON
    reordered = {"reason": CANCEL_ARGS["reason"], "order_id": ORDER}
    second = calls.call_tool(caller, name=HIGH, arguments=reordered)
    third = calls.call_state(caller, call_id=first.call_id)

    assert second.state == third.state == "pending"
    assert second.call_id == third.call_id == first.call_id
    assert second.pending["request_id"] == first.pending["request_id"]
    assert ConfirmationRequest.objects.count() == 1 and McpCall.objects.count() == 1
    assert Cancellation.objects.count() == 0


def test_other_arguments_are_another_call(caller):
    calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    other = calls.call_tool(caller, name=HIGH, arguments={**CANCEL_ARGS, "reason": "duplicate order"})
    assert other.state == "pending" and McpCall.objects.count() == 2


def test_a_retry_after_completion_replays_without_a_second_execution(caller):
    first = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    done = calls.requester_answer(caller, call_id=first.call_id, confirm=True)

    replayed = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    state = calls.call_state(caller, call_id=first.call_id)
    confirmed_again = calls.requester_answer(caller, call_id=first.call_id, confirm=True)

    for answer in (replayed, state, confirmed_again):
        assert answer.state == "completed" and answer.replayed and answer.result["idempotent_replay"] is True
        assert answer.result["data"] == done.result["data"] and answer.call_id == first.call_id
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.count() == 1 and McpCall.objects.count() == 1
    assert [r.decision for r in rows_of(McpCall.objects.get().tool_call_id)] == [
        "CONFIRMATION_REQUIRED", "CONFIRMED", "EXECUTED"]


def test_a_service_account_never_confirms_its_own_call(people):
    integration = people["acme"]["integration"]
    assign_perm("tools.use_tool", integration, Tool.objects.get(name=HIGH))
    integration.user_permissions.add(Permission.objects.get(codename="cancel_order", content_type__app_label="catalog"))
    principal = principal_of(User.objects.get(pk=integration.pk), name="integration-key")[0]
    answer = calls.call_tool(principal, name=HIGH, arguments=CANCEL_ARGS)
    assert answer.state == "pending"

    with pytest.raises(ApprovalForbidden) as refused:
        calls.requester_answer(principal, call_id=answer.call_id, confirm=True)

    assert refused.value.code == "APPROVAL_FORBIDDEN"
    assert ConfirmationRequest.objects.get(pk=answer.pending["request_id"]).status == "PENDING"
    assert Cancellation.objects.count() == 0
    # declining is not a decision in anyone's favour: allowed
    assert calls.requester_answer(principal, call_id=answer.call_id, confirm=False).state == "failed"


def test_a_deactivated_user_calls_nothing(caller, requester):
    User.objects.filter(pk=requester.pk).update(is_active=False)

    answer = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)

    assert answer.state == "failed" and code(answer) == "AUTHENTICATION_FAILED"
    assert not ConfirmationRequest.objects.exists() and not McpCall.objects.exists()


def test_a_requester_answer_on_a_call_waiting_for_approvers_only_tells_its_state(caller):
    from tests.mcp_server.calls_support import CRITICAL, REFUND_ARGS

    answer = calls.call_tool(caller, name=CRITICAL, arguments=REFUND_ARGS)

    told = calls.requester_answer(caller, call_id=answer.call_id, confirm=True)

    assert told.state == "pending" and told.pending["needs"] == "approvers" and told.pending["approvals"] == 0
    assert ConfirmationRequest.objects.get(pk=answer.pending["request_id"]).status == "PENDING"
