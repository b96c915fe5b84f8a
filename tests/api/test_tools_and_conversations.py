"""GET /api/v1/tools/ and the conversation endpoints."""
from __future__ import annotations

import uuid

from agentplatform.runtime import services
from tools.models import Tool
from tools.services import tenant_tool_set_enabled
from tests.api.conftest import assert_error


def test_tools_lists_what_i_am_offered_with_effective_policy(api, requester):
    response = api(requester).get("/api/v1/tools/")
    assert response.status_code == 200
    tools = {t["name"]: t for t in response.json()}
    assert set(tools) == {"query_inventory", "list_orders", "cancel_order", "refund_order"}
    assert (tools["cancel_order"]["risk"], tools["cancel_order"]["approval_policy"]) == ("HIGH", "REQUESTER")
    assert (tools["refund_order"]["risk"], tools["refund_order"]["approval_policy"]) == ("CRITICAL", "APPROVERS")
    assert tools["refund_order"]["quorum"] == 2
    schema = tools["cancel_order"]["parameters"]
    assert schema["type"] == "object" and "order_id" in schema["properties"]
    assert schema.get("additionalProperties") is False  # extra="forbid": no model-invented tenantId


def test_tools_follow_admin_overrides_and_tenant_switches(api, requester):
    Tool.objects.filter(name="query_inventory").update(risk_override="HIGH")
    tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="cancel_order", enabled=False)
    tools = {t["name"]: t for t in api(requester).get("/api/v1/tools/").json()}
    assert "cancel_order" not in tools
    assert (tools["query_inventory"]["risk"], tools["query_inventory"]["approval_policy"]) == ("HIGH", "REQUESTER")


def test_a_user_without_grants_is_offered_nothing(api, nobody):
    assert api(nobody).get("/api/v1/tools/").json() == []


def test_create_list_and_read_conversations(api, requester):
    client = api(requester)
    created = client.post("/api/v1/conversations/", {"title": "Stock questions"}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["title"] == "Stock questions" and body["messages"] == [] and body["latest_run"] is None
    listing = client.get("/api/v1/conversations/").json()
    assert listing["count"] == 1 and listing["results"][0]["id"] == body["id"]
    assert client.get(f"/api/v1/conversations/{body['id']}/").json()["id"] == body["id"]


def test_create_conversation_validation(api, requester):
    client = api(requester)
    assert_error(client.post("/api/v1/conversations/", {"title": 5}, format="json"), 400, "INVALID_ARGUMENTS")
    assert_error(client.post("/api/v1/conversations/", {"title": "x" * 201}, format="json"), 400, "INVALID_ARGUMENTS")
    assert client.post("/api/v1/conversations/", {}, format="json").json()["title"] == ""


def test_conversation_shows_user_messages_and_final_answers_only(api, requester):
    outcome = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?")
    detail = api(requester).get(f"/api/v1/conversations/{outcome.run.conversation_id}/").json()
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]
    assert detail["messages"][0]["content"] == "How many SKU-10001 in WH-HZ-01?"
    assert detail["messages"][1]["content"] == outcome.run.final_answer
    assert detail["messages"][1]["run_id"] == str(outcome.run.pk)
    assert detail["latest_run"] == {"id": str(outcome.run.pk), "status": "COMPLETED"}


def test_conversations_of_others_are_invisible(api, requester, approver1, outsider):
    mine = services.conversation_create(user=requester, title="mine")
    theirs = services.conversation_create(user=outsider, title="globex")
    colleague = services.conversation_create(user=approver1, title="colleague")
    client = api(requester)
    assert [c["id"] for c in client.get("/api/v1/conversations/").json()["results"]] == [str(mine.pk)]
    assert_error(client.get(f"/api/v1/conversations/{theirs.pk}/"), 404, "NOT_FOUND")
    assert_error(client.get(f"/api/v1/conversations/{colleague.pk}/"), 404, "NOT_FOUND")
    assert_error(client.get(f"/api/v1/conversations/{uuid.uuid4()}/"), 404, "NOT_FOUND")


def test_conversation_list_is_paginated(api, requester):
    for i in range(3):
        services.conversation_create(user=requester, title=f"c{i}")
    page = api(requester).get("/api/v1/conversations/?page_size=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert_error(api(requester).get("/api/v1/conversations/?page=9"), 404, "NOT_FOUND")
