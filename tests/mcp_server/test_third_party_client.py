"""A client nobody here wrote: the OpenAI Agents SDK's `MCPServerStreamableHttp`, connected to the
live server with a requester's API key, drives the governed tools through `call_tool` (no model in
between): it lists the requester's tools, runs a LOW call, a HIGH call the requester confirms
through the REST API while the client retries, and a CRITICAL call two approvers approve through
the REST API while the client retries. Every side effect is counted in the database: exactly once.
"""
from __future__ import annotations

import pytest

from agentplatform.mcp_server.models import McpCall
from agentplatform.runtime.demo.seed import order_id
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.mcp_server.third_party_support import AgentsClient, Rest, is_error, is_pending, issue_key, structured
from tools.catalog.models import Cancellation, Order, Refund
from tools.selectors import offered_tools

pytestmark = pytest.mark.django_db(transaction=True)

KEY_NAME = "support agent (Agents SDK)"


@pytest.fixture
def agent_key(requester) -> str:
    return issue_key(requester, name=KEY_NAME)


@pytest.fixture
def agent(mcp_live, agent_key):
    """The Agents SDK's MCP server object, connected as acme's requester."""
    with AgentsClient(mcp_live.url, agent_key) as client:
        yield client


@pytest.fixture
def rest(mcp_live):
    """rest(user, name) -> a REST client of the live site with a fresh API key of `user`."""
    opened: list[Rest] = []

    def make(user, name: str) -> Rest:
        opened.append(Rest(mcp_live.base, issue_key(user, name=name)))
        return opened[-1]

    yield make
    for client in opened:
        client.close()


def test_the_agents_sdk_lists_the_tools_offered_to_the_requester(agent, requester):
    tools = {tool.name: tool for tool in agent.tools()}

    assert sorted(tools) == sorted(offered_tools(user=requester))
    assert {"list_orders", "cancel_order", "refund_order"} <= set(tools)
    assert tools["list_orders"].annotations.read_only_hint is True
    assert tools["cancel_order"].annotations.destructive_hint is True
    assert tools["refund_order"].annotations.destructive_hint is True
    assert set(tools["cancel_order"].input_schema["required"]) == {"order_id", "reason"}


def test_a_service_account_is_offered_only_its_read_only_tools(mcp_live, people):
    integration = people["acme"]["integration"]
    with AgentsClient(mcp_live.url, issue_key(integration, name="nightly report")) as client:
        names = sorted(tool.name for tool in client.tools())

    assert names == sorted(offered_tools(user=integration))
    assert "cancel_order" not in names and "list_orders" in names


def test_a_low_call_runs_at_once_and_its_audit_row_names_the_key(agent, agent_key, requester):
    result = agent.call("list_orders", {"status": "PAID"})

    assert not is_error(result)
    items = structured(result)["items"]
    paid = list(Order.objects.filter(tenant=requester.tenant, status=Order.Status.PAID)
                .order_by("-created_at").values_list("order_id", flat=True)[:20])
    assert sorted(item["order_id"] for item in items) == sorted(paid)
    assert all(item["customer_name"].endswith("**") for item in items)  # masked as in the chat
    row = AuditEvent.objects.filter(tenant=requester.tenant, tool_name="list_orders").latest("occurred_at")
    assert row.channel["name"] == "mcp" and row.channel["api_key"] == KEY_NAME
    assert agent_key not in str({f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields})
    assert not McpCall.objects.exists()  # a call that ran at once leaves nothing to retry


def test_a_high_call_confirmed_by_the_requester_while_the_client_retries_runs_once(agent, rest, requester):
    cancel_id = order_id("acme", "0001")
    arguments = {"order_id": cancel_id, "reason": "the customer changed their mind"}

    # given: the call waits for its requester, and retries before the decision change nothing
    first = agent.call("cancel_order", arguments)
    assert is_pending(first)
    pending = structured(first)
    assert pending["needs"] == "requester" and pending["risk"] == "HIGH" and pending["quorum"] >= 1
    # the request's page (/approvals/mine/<id>/; the list of my requests until that page exists)
    assert "/approvals/mine/" in pending["url"] and pending["expires_at"]
    for _ in range(2):
        again = agent.call("cancel_order", arguments)
        assert is_pending(again) and structured(again)["request_id"] == pending["request_id"]
    assert ConfirmationRequest.objects.filter(tenant=requester.tenant, tool_name="cancel_order").count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=cancel_id).status == Order.Status.PAID

    # when: the requester confirms through the REST API (a fresh token, then confirm)
    confirmed = rest(requester, "requester's script").confirm_own(pending["request_id"])
    assert confirmed.status_code == 200, confirmed.text

    # then: the first retry runs it once, later retries replay the stored result
    done = agent.call("cancel_order", arguments)
    assert not is_error(done) and not is_pending(done), structured(done)
    replays = [agent.call("cancel_order", arguments) for _ in range(2)]
    assert all(structured(replay) == structured(done) for replay in replays)
    assert Cancellation.objects.filter(order__tenant=requester.tenant, order__order_id=cancel_id).count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=cancel_id).status == Order.Status.CANCELLED
    executed = AuditEvent.objects.filter(tenant=requester.tenant, tool_name="cancel_order", decision="EXECUTED")
    assert executed.count() == 1 and executed.get().channel["api_key"] == KEY_NAME


def test_a_critical_call_approved_by_two_approvers_through_the_rest_api_runs_once(
        agent, rest, requester, approver1, approver2):
    refund_id = order_id("acme", "0003")
    arguments = {"order_id": refund_id, "reason": "the parcel arrived damaged"}

    first = agent.call("refund_order", arguments)
    assert is_pending(first)
    pending = structured(first)
    assert pending["needs"] == "approvers" and pending["quorum"] == 2 and pending["approvals"] == 0
    assert pending["risk"] == "CRITICAL"
    request_id = pending["request_id"]

    # the requester cannot approve their own refund; nothing changes
    own = rest(requester, "requester's script").approve(request_id)
    assert own.status_code in (403, 404) and own.json()["code"] in ("APPROVAL_FORBIDDEN", "NOT_FOUND")

    first_approver = rest(approver1, "approver1's script")
    assert first_approver.approve(request_id, "checked the photos").status_code == 200
    halfway = agent.call("refund_order", arguments)
    assert is_pending(halfway) and structured(halfway)["approvals"] == 1
    assert structured(halfway)["request_id"] == request_id
    assert not Refund.objects.filter(order__order_id=refund_id).exists()

    second_approver = rest(approver2, "approver2's script")
    assert second_approver.approve(request_id, "ok").status_code == 200
    done = agent.call("refund_order", arguments)
    assert not is_error(done) and not is_pending(done), structured(done)
    replay = agent.call("refund_order", arguments)
    assert structured(replay) == structured(done)

    assert Refund.objects.filter(order__tenant=requester.tenant, order__order_id=refund_id).count() == 1
    assert ConfirmationRequest.objects.filter(tenant=requester.tenant, tool_name="refund_order").count() == 1
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED


def test_a_rejected_call_answers_an_error_with_the_reason_and_never_runs(agent, rest, requester, approver1):
    refund_id = order_id("acme", "0003")
    arguments = {"order_id": refund_id, "reason": "the parcel arrived damaged"}
    request_id = structured(agent.call("refund_order", arguments))["request_id"]

    rejected = rest(approver1, "approver1's script").post(
        f"/api/v1/approvals/{request_id}/reject/", {"reason": "no photos of the damage"})
    assert rejected.status_code == 200, rejected.text
    answers = [agent.call("refund_order", arguments) for _ in range(2)]

    assert all(is_error(answer) for answer in answers)
    assert structured(answers[0])["code"] == "REJECTED"
    assert "no photos of the damage" in structured(answers[0])["message"]
    assert structured(answers[1]) == structured(answers[0])
    assert not Refund.objects.filter(order__order_id=refund_id).exists()
