"""Exactly once when clients race: after the approval, 2 and then 6 real MCP clients (each its own
thread, event loop, HTTP connection and MCP session, the official SDK's client) retry the same
approved call at the same moment. One execution; every client gets the same result.

PostgreSQL only: the serialisation under test is its advisory lock and row lock, raced by the live
server's worker threads on separate database connections.
"""
from __future__ import annotations

import asyncio
import json
import threading

import pytest

from agentplatform.runtime.demo.seed import order_id
from approvals import approver_actions, requester_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.mcp_server.third_party_support import issue_key
from tools.catalog.models import Cancellation, Refund

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _race(url: str, key: str, name: str, arguments: dict, clients: int) -> list[dict]:
    """`clients` threads each open a session, wait for all to be ready, then call at once.
    Returns each client's answer: {"error": isError, "data": structuredContent}."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    ready = threading.Barrier(clients, timeout=60)
    answers: list[dict | BaseException] = [None] * clients  # type: ignore[list-item]

    async def one(index: int) -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await asyncio.to_thread(ready.wait)  # everyone connected: go together
                    result = await session.call_tool(name, arguments)
                    answers[index] = {"error": bool(result.is_error), "data": result.structured_content}

    def run(index: int) -> None:
        try:
            asyncio.run(one(index))
        except BaseException as error:  # reported below, with the others' answers
            answers[index] = error

    threads = [threading.Thread(target=run, args=(i,), name=f"mcp-racer-{i}") for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    failures = [a for a in answers if not isinstance(a, dict)]
    assert not failures, failures
    return answers  # type: ignore[return-value]


@pytest.mark.parametrize("clients", [2, 6])
def test_clients_retrying_an_approved_refund_at_the_same_moment_execute_it_once(
        mcp_live, requester, approver1, approver2, clients):
    # given: a CRITICAL refund asked over MCP, pending, then approved by two approvers
    key = issue_key(requester, name=f"racing agents ({clients})")
    refund_id = order_id("acme", "0003")
    arguments = {"order_id": refund_id, "reason": "the parcel arrived damaged"}
    [asked] = _race(mcp_live.url, key, "refund_order", arguments, 1)
    assert asked["data"]["status"] == "pending" and asked["data"]["needs"] == "approvers"
    request_id = asked["data"]["request_id"]
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1, comment="checked")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver2, comment="ok")

    # when: every client retries the same call at once
    answers = _race(mcp_live.url, key, "refund_order", arguments, clients)

    # then: one execution, and all of them got its result
    assert Refund.objects.filter(order__tenant=requester.tenant, order__order_id=refund_id).count() == 1
    assert all(not a["error"] and a["data"].get("status") != "pending" for a in answers), answers
    assert len({json.dumps(a["data"], sort_keys=True) for a in answers}) == 1, answers
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED
    assert AuditEvent.objects.filter(tenant=requester.tenant, tool_name="refund_order", decision="EXECUTED").count() == 1


@pytest.mark.parametrize("clients", [2, 6])
def test_clients_retrying_a_confirmed_cancellation_at_the_same_moment_execute_it_once(mcp_live, requester, clients):
    key = issue_key(requester, name=f"racing agents ({clients})")
    cancel_id = order_id("acme", "0001")
    arguments = {"order_id": cancel_id, "reason": "the customer changed their mind"}
    [asked] = _race(mcp_live.url, key, "cancel_order", arguments, 1)
    assert asked["data"]["status"] == "pending" and asked["data"]["needs"] == "requester"
    request_id = asked["data"]["request_id"]
    token = requester_actions.confirmation_issue_token(request_id=request_id, user=requester)
    requester_actions.confirmation_confirm(token=token, user=requester)

    answers = _race(mcp_live.url, key, "cancel_order", arguments, clients)

    assert Cancellation.objects.filter(order__tenant=requester.tenant, order__order_id=cancel_id).count() == 1
    assert all(not a["error"] and a["data"].get("status") != "pending" for a in answers), answers
    assert len({json.dumps(a["data"], sort_keys=True) for a in answers}) == 1, answers
