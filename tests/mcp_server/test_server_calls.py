"""tools/call over MCP through the SDK's client: a LOW call runs as the key's user and returns its
masked result; its audit rows name MCP and the key's name, never the key; unknown tools, another
tenant's tools and invalid arguments are tool errors with stable codes that store nothing."""
from __future__ import annotations

import json

from tests.mcp_server.conftest import INIT, issue_key, mcp_session, raw_post, run

LOW = "list_orders"


def _call(url: str, key: str, name: str, arguments):
    async def go():
        async with mcp_session(url, key) as session:
            return await session.call_tool(name, arguments)

    return run(go())


def test_low_call_runs_and_returns_structured_content(mcp_live, requester):
    from audit.models import AuditEvent

    key = issue_key(requester, "ide-assistant")
    result = _call(mcp_live.url, key, LOW, {"status": "PAID"})

    assert result.is_error is False
    assert isinstance(result.structured_content, dict) and result.structured_content
    envelope = json.loads(result.content[0].text)
    assert envelope["success"] is True and envelope["data"] == result.structured_content
    rows = list(AuditEvent.objects.filter(tool_name=LOW).exclude(decision="CONTROL_CHANGE"))
    assert [row.decision for row in rows] == ["EXECUTED"]
    assert all(row.channel["name"] == "mcp" and row.channel["api_key"] == "ide-assistant" for row in rows)
    assert all(row.channel["client"].startswith("mcp/") for row in rows)  # the SDK client's clientInfo
    stored = json.dumps(list(AuditEvent.objects.values()), default=str)
    assert key not in stored


def test_unknown_tool_is_tool_not_found(mcp_live, requester):
    result = _call(mcp_live.url, issue_key(requester), "no_such_tool", {})
    assert result.is_error is True
    assert result.structured_content["code"] == "TOOL_NOT_FOUND"


def test_another_tenants_tool_is_tool_not_found_like_a_missing_one(mcp_live, requester, outsider):
    from tools.services import tenant_tool_set_enabled

    tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="cancel_order", enabled=False)
    from agentplatform.mcp_server.models import McpCall

    result = _call(mcp_live.url, issue_key(requester), "cancel_order",
                   {"order_id": "A202607290001", "reason": "changed my mind"})
    missing = _call(mcp_live.url, issue_key(requester), "no_such_tool", {})
    assert result.is_error is True
    assert result.structured_content["code"] == missing.structured_content["code"] == "TOOL_NOT_FOUND"
    assert McpCall.objects.count() == 0


def test_invalid_arguments_are_refused_and_store_nothing(mcp_live, requester):
    from agentplatform.mcp_server.models import McpCall
    from approvals.models import ConfirmationRequest

    result = _call(mcp_live.url, issue_key(requester), "cancel_order", {"order_id": "nope", "tenantId": 7})
    assert result.is_error is True
    assert result.structured_content["code"] == "INVALID_ARGUMENTS"
    assert McpCall.objects.count() == 0 and ConfirmationRequest.objects.count() == 0


def test_json_rpc_errors_carry_a_stable_code(mcp_live, requester):
    key = issue_key(requester)
    opened = raw_post(mcp_live.url, INIT, key=key)
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    raw_post(mcp_live.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, key=key, headers=session)
    unknown = raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": 2, "method": "no/such"}, key=key, headers=session)
    bad = raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {}}},
                   key=key, headers=session)
    assert '"code":"METHOD_NOT_FOUND"' in unknown.text.replace(" ", "")
    assert '"code":"INVALID_PARAMS"' in bad.text.replace(" ", "")


def test_a_session_belongs_to_the_key_that_opened_it(mcp_live, requester, approver1):
    opened = raw_post(mcp_live.url, INIT, key=issue_key(requester))
    other = raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, key=issue_key(approver1),
                     headers={"mcp-session-id": opened.headers["mcp-session-id"],
                              "mcp-protocol-version": "2025-11-25"})
    assert other.status_code == 404


def test_answers_map_to_call_tool_results():
    from agentplatform.mcp_server.calls import Answer
    from agentplatform.mcp_server.replies import answer_result

    edited = {"changes": [{"argument": "amount", "from": "10.00", "to": "5.00"}], "edited_by": ["approver1"]}
    done = answer_result(Answer(state="completed", result={"success": True, "code": "OK", "message": "done",
                                                           "data": {"refund_id": "R1"}}, edited=edited))
    assert done.is_error is False and done.structured_content == {"refund_id": "R1"}
    assert done.content[0].text.startswith("An approver changed the arguments")
    assert done.meta["agentplatform/edited"] == edited
    listed = answer_result(Answer(state="completed", result={"success": True, "code": "OK", "data": [1, 2]}))
    assert listed.structured_content == {"value": [1, 2]}
    failed = answer_result(Answer(state="failed", result={"success": False, "code": "REJECTED",
                                                          "message": "rejected by approver1: too much"}))
    assert failed.is_error is True
    assert failed.structured_content == {"code": "REJECTED", "message": "rejected by approver1: too much"}
    assert failed.meta is None
    decided = {"username": "approver1", "name": "Approver One"}
    stored = {"success": False, "code": "REJECTED", "message": "rejected by approver1: too much",
              "data": {"decided_by": decided, "reason": "too much"}, "idempotent_replay": True}
    replayed = answer_result(Answer(state="failed", result=stored, replayed=True))
    assert replayed.structured_content == {"code": "REJECTED", "message": "rejected by approver1: too much",
                                           "reason": "too much", "decided_by": decided}
    assert replayed.meta == {"agentplatform/replayed": True}
    again = answer_result(Answer(state="completed", result={"success": True, "code": "OK", "data": {"refund_id": "R1"},
                                                            "idempotent_replay": True}, replayed=True))
    assert again.structured_content == {"refund_id": "R1"} and again.meta == {"agentplatform/replayed": True}
    pending = answer_result(Answer(state="pending", result={}, pending={
        "request_id": "r-1", "needs": "approvers", "quorum": 2, "approvals": 1, "expires_at": "2026-12-03T09:00:00",
        "url": "http://x/approvals/mine/r-1/", "summary": "Refund", "risk": "CRITICAL"}))
    assert pending.is_error is False
    assert pending.structured_content["status"] == "pending" and pending.structured_content["quorum"] == 2
    assert "2 approver(s)" in pending.content[0].text and "http://x/approvals/mine/r-1/" in pending.content[0].text
