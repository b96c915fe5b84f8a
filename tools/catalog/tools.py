"""The built-in catalog: query_inventory, list_orders, cancel_order, refund_order.

Parameter models forbid extra fields, so a model-invented `tenantId` or `isAdmin` is rejected;
tenant and user come from the ToolContext only, never from the model.
"""
from __future__ import annotations

import datetime
import re
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.catalog import services
from tools.context import ToolContext
from tools.errors import ToolValidationError
from tools.hashing import key_hash
from core.redaction.fields import mask_address, mask_phone
from tools.money import normalize_amount
from tools.registry import EditRule, tool

SKU_PATTERN = re.compile(r"SKU-[0-9]{5}")
ORDER_PATTERN = re.compile(r"A[0-9]{12}")
WAREHOUSE_PATTERN = re.compile(r"WH-[A-Z]{2}-[0-9]{2}")


def _require_order_id(order_id: str) -> None:
    if not ORDER_PATTERN.fullmatch(order_id):
        raise ToolValidationError("order_id must be 'A' followed by 12 digits, e.g. A202607290001")


def _require_reason(reason: str) -> None:
    if not reason.strip():
        raise ToolValidationError("reason must not be blank")


# -- query_inventory ------------------------------------------------------------------------------

class QueryInventory(BaseModel):
    """Parameters of query_inventory."""

    model_config = ConfigDict(extra="forbid")
    sku: str = Field(description="Product SKU, e.g. SKU-10001", max_length=16)
    warehouse_code: str | None = Field(default=None, description="Warehouse code, e.g. WH-HZ-01; omit if unknown",
                                       max_length=16)


def _validate_inventory(params: QueryInventory) -> None:
    if not SKU_PATTERN.fullmatch(params.sku):
        raise ToolValidationError("sku must look like SKU-10001 (SKU- and 5 digits)")
    if params.warehouse_code and not WAREHOUSE_PATTERN.fullmatch(params.warehouse_code):
        raise ToolValidationError("warehouse_code must look like WH-HZ-01")


def _inventory_converter(data: dict[str, Any]) -> dict[str, Any]:
    # Allow-list: cost and supplier prices never reach the model.
    return {"sku": data["sku"], "total_available": data["total_available"],
            "warehouses": [{k: w[k] for k in ("warehouse_code", "available_quantity", "locked_quantity", "updated_at")}
                           for w in data["warehouses"]]}


@tool(
    name="query_inventory",
    title="Check stock / 查询库存",
    owner="Warehouse team <warehouse-team@example.com>",
    version="1.0.0",
    description=("Look up the real-time stock of a product SKU in the company's warehouses. Use it when the user "
                 "asks how many units are available or locked, optionally in one warehouse. Not for forecasts, "
                 "not for changing stock."),
    parameters=QueryInventory,
    risk="MEDIUM",
    read_only=True,
    permission="catalog.view_stocklevel",
    validate=_validate_inventory,
    result_converter=_inventory_converter,
)
def query_inventory(ctx: ToolContext, params: QueryInventory) -> dict[str, Any]:
    return services.inventory_query(tenant_id=ctx.tenant_id, sku=params.sku, warehouse_code=params.warehouse_code)


# -- list_orders ----------------------------------------------------------------------------------

class ListOrders(BaseModel):
    """Parameters of list_orders."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["PAID", "SHIPPED", "COMPLETED", "CANCELLED", "REFUNDED"] | None = Field(
        default=None, description="Only orders in this status")
    since: datetime.date | None = Field(default=None, description="Only orders created on or after this date")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page", max_length=64)


def _orders_converter(data: dict[str, Any]) -> dict[str, Any]:
    items = [{"order_id": o["order_id"], "status": o["status"], "amount": o["amount"],
              "customer_name": o["customer_name"][:1] + "**", "customer_phone": mask_phone(o["customer_phone"]),
              "shipping_address": mask_address(o["shipping_address"]), "created_at": o["created_at"]}
             for o in data["items"]]
    return {**data, "items": items}


@tool(
    name="list_orders",
    title="List orders / 查询订单",
    owner="Order operations <orders-team@example.com>",
    version="1.0.0",
    description="List the company's orders, newest first, 20 per page; pass next_cursor to get the next page.",
    parameters=ListOrders,
    read_only=True,
    risk="LOW",
    permission="catalog.view_order",
    result_converter=_orders_converter,
)
def list_orders(ctx: ToolContext, params: ListOrders) -> dict[str, Any]:
    return services.orders_list(tenant_id=ctx.tenant_id, status=params.status, cursor=params.cursor,
                                since=params.since)


# -- cancel_order ---------------------------------------------------------------------------------

class CancelOrder(BaseModel):
    """Parameters of cancel_order."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(description="Full order id, e.g. A202607290001", max_length=13)
    reason: str = Field(description="Why the order is cancelled; must not be blank", max_length=500)


def _validate_cancel(params: CancelOrder) -> None:
    _require_order_id(params.order_id)
    _require_reason(params.reason)


@tool(
    name="cancel_order",
    title="Cancel an order / 取消订单",
    owner="Order operations <orders-team@example.com>",
    version="1.0.0",
    description=("Cancel one order that has not shipped yet. It changes the real order and needs the user's "
                 "explicit confirmation. Not for refunds; shipped or completed orders cannot be cancelled."),
    parameters=CancelOrder,
    risk="HIGH",
    permission="catalog.cancel_order",
    validate=_validate_cancel,
    # One cancellation per order and conversation: sha256(tenant:conversation:cancel_order:order_id)
    idempotency_key=lambda ctx, p: key_hash(ctx.tenant_id, ctx.conversation_id, "cancel_order", p.order_id),
    describe=lambda p, facts: f"Cancel order {p.order_id} / 取消订单 {p.order_id}",
    free_text=("reason",),
    # An approver may reword the reason; which order is cancelled is the requester's to say.
    editable={"reason": EditRule.ANY},
    approval_context=lambda ctx, p: services.order_cancel_context(tenant_id=ctx.tenant_id, order_id=p.order_id),
    business_result_id=lambda data: data["cancellation_id"],
    precheck=lambda ctx, p: services.order_cancel_precheck(tenant_id=ctx.tenant_id, order_id=p.order_id),
    business_object=lambda p: f"order:{p.order_id}",
)
def cancel_order(ctx: ToolContext, params: CancelOrder) -> dict[str, Any]:
    return services.order_cancel(tenant_id=ctx.tenant_id, order_id=params.order_id, reason=params.reason.strip(),
                                 user_id=ctx.user_id)


# -- refund_order ---------------------------------------------------------------------------------

class RefundOrder(BaseModel):
    """Parameters of refund_order."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(description="Full order id, e.g. A202607290001", max_length=13)
    amount: Decimal | None = Field(
        default=None, gt=0, max_digits=12,
        description=("Amount to refund in the order's currency, at most its minor unit (2 decimals for CNY, "
                     "0 for JPY); omit for the full remaining amount"))
    reason: str = Field(description="Why the order is refunded; must not be blank", max_length=500)


def _validate_refund(params: RefundOrder) -> None:
    _require_order_id(params.order_id)
    _require_reason(params.reason)


def _refund_currency(ctx: ToolContext, params: RefundOrder) -> str | None:
    """The ISO 4217 currency of the order refunded (tenant-scoped, read-only), None when unknown."""
    return services.order_currency(tenant_id=ctx.tenant_id, order_id=params.order_id)


def _normalize_refund(ctx: ToolContext, params: RefundOrder) -> RefundOrder:
    """The amount as a Decimal in the order's minor unit (tools.money), before hashing, display and
    execution: 1e2, 100 and 100.00 are one amount. Raises MoneyInvalid (INVALID_ARGUMENTS)."""
    if params.amount is None:
        return params
    currency = _refund_currency(ctx, params)
    return params.model_copy(update={"amount": normalize_amount(params.amount, currency=currency)})


def _refund_policy_arguments(ctx: ToolContext, params: RefundOrder) -> dict[str, Any]:
    """What policy reads for a full refund (no `amount`): the refundable remainder, so a rule on
    the amount judges what would actually leave the company."""
    if params.amount is not None:
        return {}
    return {"amount": str(services.order_refundable(tenant_id=ctx.tenant_id, order_id=params.order_id))}


def _describe_refund(params: RefundOrder, facts: dict[str, Any]) -> str:
    """'Refund CNY 100.00 of order A…' in the platform's words; a full refund names the amount."""
    shown = (facts.get("refund_amount") or {}).get("display")
    if params.amount is not None:
        what = shown or str(params.amount)
        return f"Refund {what} of order {params.order_id} / 退款 {what}，订单 {params.order_id}"
    what = f"the full remaining amount ({shown})" if shown else "the full remaining amount"
    zh = f"全额退款（{shown}）" if shown else "全额退款"
    return f"Refund {what} of order {params.order_id} / {zh}，订单 {params.order_id}"


@tool(
    name="refund_order",
    title="Refund an order / 订单退款",
    owner="Payments team <payments-team@example.com>",
    version="1.0.0",
    description=("Refund an order in full or in part. Money leaves the company: two approvers must approve "
                 "every refund before it runs."),
    parameters=RefundOrder,
    risk="CRITICAL",
    permission="catalog.refund_order",
    quorum=2,
    ttl_seconds=3600,
    validate=_validate_refund,
    idempotency_key=lambda ctx, p: key_hash(ctx.tenant_id, ctx.conversation_id, "refund_order", p.order_id),
    normalize=_normalize_refund,
    currency=_refund_currency,
    describe=_describe_refund,
    free_text=("reason",),
    policy_arguments=_refund_policy_arguments,
    policy_fills=("amount",),
    # An approver may refund less than asked (never more: compared with the requester's own amount
    # in minor units) and reword the reason; never another order.
    editable={"amount": EditRule.DECREASE_ONLY, "reason": EditRule.ANY},
    approval_context=lambda ctx, p: services.order_refund_context(tenant_id=ctx.tenant_id, order_id=p.order_id,
                                                                  amount=p.amount),
    business_result_id=lambda data: data["refund_id"],
    precheck=lambda ctx, p: services.order_refund_precheck(tenant_id=ctx.tenant_id, order_id=p.order_id,
                                                           amount=p.amount),
    business_object=lambda p: f"order:{p.order_id}",
)
def refund_order(ctx: ToolContext, params: RefundOrder) -> dict[str, Any]:
    return services.order_refund(tenant_id=ctx.tenant_id, order_id=params.order_id, amount=params.amount,
                                 reason=params.reason.strip(), user_id=ctx.user_id)
