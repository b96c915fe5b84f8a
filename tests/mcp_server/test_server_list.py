"""tools/list over MCP: what a chat of the key's user is offered now, with reviewed descriptions,
schemas, bilingual titles and annotations from our registry; it follows the admin's changes and
says so with notifications/tools/list_changed."""
from __future__ import annotations

import anyio

from tests.mcp_server.conftest import issue_key, mcp_session, run


def _listing(url: str, key: str):
    async def go():
        async with mcp_session(url, key) as session:
            return session.server_capabilities, (await session.list_tools()).tools

    return run(go())


def test_lists_what_the_chat_offers_with_annotations(mcp_live, requester):
    from tools.selectors import offered_tools

    capabilities, tools = _listing(mcp_live.url, issue_key(requester))

    assert capabilities.tools.list_changed is True
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == set(offered_tools(user=requester))
    assert {"list_orders", "cancel_order", "refund_order"} <= set(by_name)
    # The chat sends the model spec.definition() of each offered tool (tools.manager.resolve).
    chat = {name: spec.definition()["function"] for name, (spec, _) in offered_tools(user=requester).items()}
    for name, tool in by_name.items():
        assert tool.description == chat[name]["description"]
        assert tool.input_schema == chat[name]["parameters"]
    assert by_name["cancel_order"].title == "Cancel an order / 取消订单"
    listed = by_name["list_orders"].annotations
    assert (listed.read_only_hint, listed.destructive_hint, listed.idempotent_hint) == (True, False, True)
    cancel = by_name["cancel_order"].annotations
    assert (cancel.read_only_hint, cancel.destructive_hint, cancel.idempotent_hint) == (False, True, True)
    assert by_name["refund_order"].annotations.destructive_hint is True
    assert cancel.open_world_hint is False


def test_a_read_only_tool_is_not_destructive_even_when_a_tenant_raises_its_risk(mcp_live, requester):
    from tools.models import TenantToolPolicy

    TenantToolPolicy.objects.filter(tenant_id=requester.tenant_id, tool__name="query_inventory").update(
        risk_override="HIGH")
    _, tools = _listing(mcp_live.url, issue_key(requester))
    inventory = {tool.name: tool for tool in tools}["query_inventory"]
    assert inventory.annotations.read_only_hint is True
    assert inventory.annotations.destructive_hint is False  # a read-only tool destroys nothing


def test_another_tenants_tools_are_absent(mcp_live, requester, outsider):
    from tools.services import tenant_tool_set_enabled

    # acme switches cancel_order off; globex keeps it.
    tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="cancel_order", enabled=False)
    _, acme = _listing(mcp_live.url, issue_key(requester))
    _, globex = _listing(mcp_live.url, issue_key(outsider))
    assert "cancel_order" not in {tool.name for tool in acme}
    assert "cancel_order" in {tool.name for tool in globex}


def test_a_user_without_grants_lists_nothing(mcp_live, nobody):
    _, tools = _listing(mcp_live.url, issue_key(nobody))
    assert tools == []


def test_disabling_a_tool_removes_it_and_notifies_list_changed(mcp_live, requester, settings):
    from tools.services import tenant_tool_set_enabled

    settings.MCP_LIST_CHANGED_POLL_SECONDS = 0.2
    key = issue_key(requester)

    async def go():
        changed = anyio.Event()

        async def on_message(message):
            if getattr(message, "method", "") == "notifications/tools/list_changed":
                changed.set()

        async with mcp_session(mcp_live.url, key, message_handler=on_message) as session:
            before = {tool.name for tool in (await session.list_tools()).tools}
            await anyio.to_thread.run_sync(
                lambda: tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="cancel_order",
                                                enabled=False))
            with anyio.fail_after(15):
                await changed.wait()
            after = {tool.name for tool in (await session.list_tools()).tools}
            return before, after

    before, after = run(go())
    assert "cancel_order" in before
    assert after == before - {"cancel_order"}
