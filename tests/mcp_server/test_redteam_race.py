"""Racers over MCP (PostgreSQL, real concurrent clients on separate connections): after the first
approval of a CRITICAL refund asked as a task, the second approver's approval (REST), the
requester's tasks/cancel, a tasks/result and two plain retries all arrive at the same moment.
Whichever wins, the outcome is one story: withdrawn and nothing ran, or approved and run exactly
once, every client told the same."""
from __future__ import annotations

import threading

import httpx
import pytest

from tests.mcp_server.conftest import RawSession, issue_key

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CRITICAL = "refund_order"


def _together(jobs: list) -> list:
    ready = threading.Barrier(len(jobs), timeout=60)
    out: list = [None] * len(jobs)

    def run(index: int) -> None:
        ready.wait()
        try:
            out[index] = jobs[index]()
        except BaseException as error:  # noqa: BLE001 - reported by the assertions
            out[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return out


@pytest.mark.parametrize("attempt", range(3))
def test_cancel_racing_the_deciding_approval_and_retries_runs_at_most_once(mcp_live, requester, approver1,
                                                                          approver2, settings, attempt):
    from agentplatform.mcp_server.models import McpCall
    from approvals import approver_actions
    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Refund

    settings.MCP_TASK_RESULT_WAIT_SECONDS = 2
    settings.MCP_TASK_POLL_SECONDS = 0.1
    key = issue_key(requester, name=f"racer {attempt}")
    arguments = {"order_id": "A202607290003", "amount": str(10 + attempt), "reason": "the parcel arrived broken"}
    sessions = [RawSession(mcp_live.url, key) for _ in range(4)]
    task = sessions[0].request("tools/call", {"name": CRITICAL, "arguments": arguments, "task": {"ttl": 60_000}})
    task_id = task["result"]["task"]["taskId"]
    request_id = McpCall.objects.get(pk=task_id).request_id
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1, comment="one")
    approve_key = issue_key(approver2)

    def approve():
        return httpx.post(f"{mcp_live.base}/api/v1/approvals/{request_id}/approve/", json={"comment": "two"},
                          headers={"Authorization": f"Token {approve_key}"}, timeout=60).status_code

    jobs = [approve,
            lambda: sessions[0].request("tasks/cancel", {"taskId": task_id}),
            lambda: sessions[1].request("tasks/result", {"taskId": task_id}),
            lambda: sessions[2].request("tools/call", {"name": CRITICAL, "arguments": arguments}),
            lambda: sessions[3].request("tools/call", {"name": CRITICAL, "arguments": arguments})]
    approved, cancelled, result, retry1, retry2 = _together(jobs)
    for answer in (cancelled, result, retry1, retry2):
        assert isinstance(answer, dict), answer

    request = ConfirmationRequest.objects.get(pk=request_id)
    refunds = Refund.objects.filter(order__order_id="A202607290003", order__tenant=requester.tenant).count()
    settled = sessions[2].request("tools/call", {"name": CRITICAL, "arguments": arguments})["result"]
    if request.status == ConfirmationRequest.Status.WITHDRAWN:
        assert refunds == 0 and approved in (400, 404, 409), approved
        assert settled["isError"] is True and settled["structuredContent"]["code"] == "WITHDRAWN"
        assert "error" not in cancelled and cancelled["result"]["status"] == "cancelled"
    else:
        assert approved == 200 and request.status == ConfirmationRequest.Status.CONSUMED
        assert refunds == 1
        assert settled["isError"] is False
        assert McpCall.objects.get(pk=task_id).status == McpCall.Status.COMPLETED
    for answer in (result, retry1, retry2):
        body = answer["result"]
        # each is the pending answer (it read before the decision), or the one story's end
        if body.get("structuredContent", {}).get("status") != "pending":
            assert body["isError"] is settled["isError"], (body, settled)
            assert body["structuredContent"] == settled["structuredContent"], (body, settled)
    assert McpCall.objects.filter(request_id=request_id).count() == 1


def test_cancel_of_an_approved_task_never_runs_it(mcp_live, requester, approver1, approver2):
    """Both approvals are in and nothing ran yet: tasks/cancel answers ALREADY_DECIDED and runs
    nothing (the call runs at the next tasks/result, once)."""
    from agentplatform.mcp_server.models import McpCall
    from approvals import approver_actions
    from tools.catalog.models import Refund

    session = RawSession(mcp_live.url, issue_key(requester))
    arguments = {"order_id": "A202607290003", "amount": "12", "reason": "the parcel arrived broken"}
    task_id = session.request("tools/call", {"name": CRITICAL, "arguments": arguments,
                                             "task": {}})["result"]["task"]["taskId"]
    request_id = McpCall.objects.get(pk=task_id).request_id
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1, comment="one")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver2, comment="two")

    error = session.request("tasks/cancel", {"taskId": task_id})["error"]
    assert error["code"] == -32602 and error["data"]["code"] == "ALREADY_DECIDED"
    assert Refund.objects.count() == 0
    assert McpCall.objects.get(pk=task_id).status == McpCall.Status.WAITING
    result = session.request("tasks/result", {"taskId": task_id})["result"]
    assert result["isError"] is False and Refund.objects.count() == 1
    again = session.request("tasks/cancel", {"taskId": task_id})["error"]
    assert again["data"]["code"] == "TASK_ENDED"
