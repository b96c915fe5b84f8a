"""MCP Tasks (2025-11-25) for calls that wait for people: a CRITICAL call as a task is `working`
while two approvers decide through the REST API, then `completed` with its result, run once; a
HIGH call waits on its requester (`input_required`); tasks/cancel withdraws the request; another
key's or an unknown task is TASK_NOT_FOUND."""
from __future__ import annotations

import httpx

from tests.mcp_server.conftest import RawSession, issue_key

CRITICAL, HIGH = "refund_order", "cancel_order"
REFUND_ARGS = {"order_id": "A202607290003", "amount": "10", "reason": "the parcel arrived broken"}
CANCEL_ARGS = {"order_id": "A202607290001", "reason": "customer changed their mind"}


def _as_task(session: RawSession, name: str, arguments: dict) -> dict:
    answer = session.request("tools/call", {"name": name, "arguments": arguments, "task": {"ttl": 60_000}})
    return answer["result"]["task"]


def _approve(base: str, approver, request_id: str) -> None:
    response = httpx.post(f"{base}/api/v1/approvals/{request_id}/approve/", json={"comment": "ok"},
                          headers={"Authorization": f"Token {issue_key(approver)}"}, timeout=30)
    assert response.status_code == 200, response.text


def test_critical_call_as_a_task_completes_after_two_approvals(mcp_live, requester, approver1, approver2, settings):
    from agentplatform.mcp_server.models import McpCall
    from tools.catalog.models import Refund

    settings.MCP_TASK_POLL_SECONDS = 0.2
    session = RawSession(mcp_live.url, issue_key(requester))
    assert session.initialize["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}

    task = _as_task(session, CRITICAL, REFUND_ARGS)
    assert task["status"] == "working" and task["pollInterval"] == 200
    assert session.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "working"
    request_id = str(McpCall.objects.get(pk=task["taskId"]).request_id)

    _approve(mcp_live.base, approver1, request_id)
    assert session.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "working"
    assert Refund.objects.count() == 0
    _approve(mcp_live.base, approver2, request_id)

    result = session.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert result["isError"] is False and "status" not in result["structuredContent"]
    assert result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == task["taskId"]
    assert session.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "completed"
    assert session.request("tasks/result", {"taskId": task["taskId"]})["result"]["structuredContent"] == \
        result["structuredContent"]
    assert Refund.objects.count() == 1


def test_high_call_as_a_task_waits_on_the_requester(mcp_live, requester):
    session = RawSession(mcp_live.url, issue_key(requester))
    task = _as_task(session, HIGH, CANCEL_ARGS)
    assert task["status"] == "input_required"


def test_cancel_withdraws_the_request(mcp_live, requester, settings):
    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Refund

    settings.MCP_TASK_RESULT_WAIT_SECONDS = 1
    session = RawSession(mcp_live.url, issue_key(requester))
    task = _as_task(session, CRITICAL, REFUND_ARGS)

    cancelled = session.request("tasks/cancel", {"taskId": task["taskId"]})["result"]
    assert cancelled["status"] == "cancelled"
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.WITHDRAWN
    result = session.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert result["isError"] is True and result["structuredContent"]["code"] == "WITHDRAWN"
    again = session.request("tasks/cancel", {"taskId": task["taskId"]})["error"]
    assert again["code"] == -32602 and again["data"]["code"] == "TASK_ENDED"
    assert Refund.objects.count() == 0


def test_unknown_or_another_keys_task_is_not_found(mcp_live, requester, approver1):
    mine = RawSession(mcp_live.url, issue_key(requester))
    task = _as_task(mine, CRITICAL, REFUND_ARGS)
    other = RawSession(mcp_live.url, issue_key(approver1))
    for session, task_id in ((other, task["taskId"]), (mine, "00000000-0000-0000-0000-000000000000"),
                             (mine, "not-a-uuid")):
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            error = session.request(method, {"taskId": task_id})["error"]
            assert error["code"] == -32602 and error["data"]["code"] == "TASK_NOT_FOUND"


def test_a_call_that_runs_at_once_answers_its_result(mcp_live, requester):
    session = RawSession(mcp_live.url, issue_key(requester))
    answer = session.request("tools/call", {"name": "list_orders", "arguments": {}, "task": {}})["result"]
    assert "task" not in answer and answer["isError"] is False
