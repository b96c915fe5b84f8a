"""The chat's suggestions follow the tools offered to the person and the state of the orders they name."""
from __future__ import annotations

from agentplatform.runtime.demo.seed import TRY_ORDERS, order_id
from agentplatform.runtime.demo.suggestions import suggestions
from tools.catalog.models import Order, Refund
from tools.selectors import offered_tools

CANCEL, REFUND, CANCEL_ZH = (order_id("acme", TRY_ORDERS[k]) for k in ("cancel", "refund", "cancel_zh"))


def test_every_suggestion_needs_its_tool_offered(requester):
    offered = set(offered_tools(user=requester))
    assert {"cancel_order", "refund_order", "query_inventory", "list_orders"} <= offered
    everything = suggestions("acme", offered=offered)
    assert len(everything) == 5 and any(CANCEL in s for s in everything)

    without_cancel = suggestions("acme", offered=offered - {"cancel_order"})
    assert not any(CANCEL in s or CANCEL_ZH in s for s in without_cancel)
    assert any(REFUND in s for s in without_cancel)
    assert suggestions("acme", offered=set()) == []


def test_a_suggestion_never_names_an_order_that_cannot_succeed_any_more(requester):
    offered = set(offered_tools(user=requester))
    Order.objects.filter(tenant=requester.tenant, order_id=CANCEL_ZH).update(status=Order.Status.CANCELLED)
    order = Order.objects.get(tenant=requester.tenant, order_id=REFUND)
    Refund.objects.create(order=order, amount=order.amount, reason="test", tenant=requester.tenant)

    left = suggestions("acme", offered=offered)

    assert not any(CANCEL_ZH in s or REFUND in s for s in left)
    assert any(CANCEL in s for s in left)
