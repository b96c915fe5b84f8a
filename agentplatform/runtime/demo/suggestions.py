"""The chat's suggested messages (the chips of an empty chat): questions that can succeed now for
the person who reads them, after `manage.py demo`."""
from __future__ import annotations

from decimal import Decimal

from agentplatform.runtime.demo.seed import TENANTS, TRY_ORDERS, order_id
from tools.catalog.models import Order

SUGGESTED_REFUND = Decimal("50")


def _still_fresh(tenant_slug: str, suffixes: dict[str, str]) -> set[str]:
    """The keys of `suffixes` (TRY_ORDERS keys) whose demo order can still be cancelled (PAID,
    nothing refunded) or refunded (not cancelled, at least SUGGESTED_REFUND left), read now."""
    ids = {order_id(tenant_slug, suffix): key for key, suffix in suffixes.items()}
    orders = Order.objects.filter(tenant__slug=tenant_slug, order_id__in=list(ids)).prefetch_related("refunds")
    fresh = set()
    for order in orders:
        key = ids[order.order_id]
        refunded = sum((r.amount for r in order.refunds.all()), Decimal("0"))
        if key.startswith("cancel") and order.status == Order.Status.PAID and not refunded:
            fresh.add(key)
        if key == "refund" and order.status in (Order.Status.PAID, Order.Status.SHIPPED, Order.Status.COMPLETED) \
                and order.amount - refunded >= SUGGESTED_REFUND:
            fresh.add(key)
    return fresh


def suggestions(tenant_slug: str | None, *, offered: set[str] | frozenset[str] | None = None) -> list[str]:
    """The chat page's suggested messages for a member of `tenant_slug`: questions that can
    succeed now. Each needs its tool among `offered` (the tool names offered to the person now;
    None: do not filter), and one naming an order only while that order can still be cancelled or
    refunded (TRY_ORDERS, which the story leaves PAID; one query). A tenant the demo did not seed
    gets the questions without order ids."""
    def wanted(tool: str) -> bool:
        return offered is None or tool in offered

    first = [text for tool, text in (("query_inventory", "How many SKU-10001 are in WH-HZ-01?"),
                                     ("list_orders", "List shipped orders")) if wanted(tool)]
    if tenant_slug not in TENANTS:
        return first
    keys = {k: v for k, v in TRY_ORDERS.items() if wanted("refund_order" if k == "refund" else "cancel_order")}
    fresh = _still_fresh(tenant_slug, keys) if keys else set()
    cancel, refund, cancel_zh = (order_id(tenant_slug, TRY_ORDERS[k]) for k in ("cancel", "refund", "cancel_zh"))
    texts = {"cancel": f"Cancel {cancel} because the customer changed their mind",
             "refund": f"Refund {refund} amount {SUGGESTED_REFUND} because the item arrived damaged",
             "cancel_zh": f"取消订单 {cancel_zh}，原因：客户不想要了"}
    return first + [texts[k] for k in ("cancel", "refund", "cancel_zh") if k in fresh]
