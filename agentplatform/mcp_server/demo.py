"""The demo's last step (`manage.py demo`, step 18): an agent that is not ours, governed over MCP.

A client of the official `mcp` SDK connects to `/mcp/` with an API key of acme's requester, lists
the tools offered to them, calls a LOW tool (it runs at once), and a HIGH one: the call answers
"pending" at once, a retry before the decision is still pending (no second request), the requester
confirms it (as on the request's page), the next retry runs it once and a later retry replays the
stored result. The demo runs without a server, so the platform's ASGI application is served in
this process for the step (agentplatform.mcp_server.local_server). A mixin of the demo command: it
uses the command's title, say and expect.
"""
from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

from knox.models import get_token_model

from agentplatform.mcp_server.local_server import served
from agentplatform.mcp_server.models import McpCall
from agentplatform.runtime.demo.seed import order_id
from agentplatform.tenancy.credentials import api_key_issue, api_key_revoke
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tools.catalog.models import Cancellation, Order
from tools.selectors import offered_tools

KEY_NAME = "demo MCP client"
MCP_ORDER = "0010"  # the acme order the MCP step cancels; created when missing, PAID again each run


def _order(tenant) -> str:
    """The MCP step's order, PAID (created when missing, reset when a run cancelled it)."""
    oid = order_id(tenant.slug, MCP_ORDER)
    Order.objects.update_or_create(
        tenant=tenant, order_id=oid,
        defaults={"status": Order.Status.PAID, "amount": Decimal("99.00"), "customer_name": "Zhou Xun",
                  "customer_phone": "13100007777", "shipping_address": "Xiamen Siming District, Zhongshan Road 5",
                  "items": [{"sku": "SKU-10002", "name": "Notebook", "quantity": 2}]})
    Cancellation.objects.filter(order__tenant=tenant, order__order_id=oid).delete()
    return oid


def _fresh_key(user) -> str:
    """A new key named KEY_NAME for `user`, issued to themselves (the demo's earlier ones revoked)."""
    for public_id in get_token_model().objects.filter(user=user, name=KEY_NAME).values_list("public_id", flat=True):
        api_key_revoke(public_id=public_id, actor=user)
    _, raw = api_key_issue(user=user, name=KEY_NAME, expires_in_days=1, actor=user)
    return raw


def _asgi_app() -> Any:
    """The platform's ASGI application as agentplatform.asgi builds it: /mcp/ in front of Django."""
    from django.core.asgi import get_asgi_application

    from agentplatform.mcp_server.asgi_app import router

    return router(get_asgi_application())


class McpStory:
    """Step 18 of the demo command (mixed into its Command)."""

    def mcp_story(self, requester) -> None:
        """Play step 18 as `requester` (acme's): a fresh API key, the platform served in this
        process, the official client's listing, LOW call and HIGH call with its retries. Raises
        CommandError (through `expect`) when a promise does not hold."""
        from agentplatform.mcp_server import demo_client

        self.title("18. Any agent, governed: an MCP client at /mcp/ (the official SDK, over streamable HTTP)")
        oid = _order(requester.tenant)
        key = self.mcp_key = _fresh_key(requester)
        self.say(f"   {requester.username} issued an API key for the agent, named \"{KEY_NAME}\" "
                 f"({key[:6]}…, shown once; the client sends it as Authorization: Bearer)")
        with served(_asgi_app()) as base_url:
            self.say(f"   served the platform in this process at {base_url}/mcp/ (the demo runs no server)")
            with demo_client.Session(f"{base_url}/mcp/", key) as client:
                self._listing(client, requester)
                self._low(client, requester)
                self._high(client, requester, oid)

    def _listing(self, client, requester) -> None:
        names = client.list_tool_names()
        self.say(f"\n   client > tools/list\n   ← {', '.join(names)}")
        offered = sorted(offered_tools(user=requester))
        self.expect(sorted(names) == offered, f"the client sees exactly the tools offered to {requester.username}")

    def _low(self, client, requester) -> None:
        self.say('\n   client > tools/call list_orders {"status": "PAID"}')
        result = client.call("list_orders", {"status": "PAID"})
        items = result.data.get("items", [])
        self.say(f"   ← completed: {len(items)} PAID orders, e.g. {json.dumps(items[0], ensure_ascii=False)[:110]}…")
        paid = Order.objects.filter(tenant=requester.tenant, status=Order.Status.PAID).count()
        self.expect(not result.error and len(items) == min(paid, 20), "the LOW call ran at once, from the database")
        row = AuditEvent.objects.filter(tenant=requester.tenant, tool_name="list_orders").order_by("-occurred_at").first()
        channel = (row.channel or {}) if row else {}
        self.expect(channel.get("name") == "mcp" and channel.get("api_key") == KEY_NAME
                    and self.mcp_key not in json.dumps(_columns(row), default=str),
                    f"its audit row says it came over MCP with the key's name ({json.dumps(channel)[:90]}…), "
                    "never the key")

    def _high(self, client, requester, oid: str) -> None:
        arguments = {"order_id": oid, "reason": "the customer changed their mind"}
        self.say(f"\n   client > tools/call cancel_order {json.dumps(arguments)}")
        first = client.call("cancel_order", arguments)
        pending = first.data
        self.say(f"   ← pending: needs the {pending.get('needs')}, request {pending.get('request_id')}, "
                 f"expires {pending.get('expires_at')}\n     {pending.get('url')}")
        self.expect(first.pending and pending.get("needs") == "requester"
                    and Order.objects.get(tenant=requester.tenant, order_id=oid).status == Order.Status.PAID,
                    "HIGH risk: the call returned at once, pending the requester's confirmation; nothing changed")
        self.say("\n   client > tools/call cancel_order (the same call again, before anyone decided)")
        again = client.call("cancel_order", arguments)
        self.say(f"   ← still pending: request {again.data.get('request_id')}, "
                 f"{again.data.get('approvals')} of {again.data.get('quorum')} confirmations")
        self.expect(again.pending and again.data.get("request_id") == pending.get("request_id")
                    and ConfirmationRequest.objects.filter(pk=pending["request_id"]).count() == 1
                    and McpCall.objects.filter(request_id=pending["request_id"]).count() == 1,
                    "still pending, the same request: a retry never creates a second one")
        requester_actions.confirmation_confirm_own(request_id=uuid.UUID(pending["request_id"]), user=requester)
        self.say(f"\n   {requester.username} confirms on the request's page (here: the page's own service)")
        self.say("\n   client > tools/call cancel_order (retry after the decision)")
        done = client.call("cancel_order", arguments)
        self.say(f"   ← completed: {json.dumps(done.data, ensure_ascii=False)[:120]}")
        self.expect(not done.error and not done.pending
                    and Cancellation.objects.filter(order__tenant=requester.tenant, order__order_id=oid).count() == 1,
                    "the first retry after the confirmation ran it: the order was cancelled once")
        self.say("\n   client > tools/call cancel_order (a later retry)")
        replay = client.call("cancel_order", arguments)
        self.say(f"   ← the stored result again: {json.dumps(replay.data, ensure_ascii=False)[:100]}")
        self.expect(replay.data == done.data
                    and Cancellation.objects.filter(order__tenant=requester.tenant, order__order_id=oid).count() == 1,
                    "a later retry replays the stored result: still exactly one cancellation")


def _columns(row) -> dict[str, Any]:
    """Every column of an audit row, to look for a secret in."""
    return {field.attname: getattr(row, field.attname) for field in row._meta.concrete_fields} if row else {}
