"""Side effects run at most once per idempotency key, proven with 50 concurrent identical calls
against PostgreSQL. Real threads on a barrier."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import F
from pydantic import BaseModel, ConfigDict

from agentplatform.runtime.services import conversation_create
from agentplatform.tenancy.models import User
from tests.tools.support import ORDER, assistant, audit_rows, race, tool_context
from tools.catalog.models import Order
from tools.context import ToolContext
from tools.hashing import key_hash
from tools.manager import ToolCallingManager
from tools.models import IdempotencyRecord
from tools.registry import ToolSpec

pytestmark = pytest.mark.postgres


class StampOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str


def _stamp(ctx: ToolContext, params: StampOrder) -> dict[str, Any]:
    # The side effect counts itself: every execution adds 1.00 to the order's amount.
    Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(amount=F("amount") + 1)
    order = Order.objects.get(tenant_id=ctx.tenant_id, order_id=params.order_id)
    return {"order_id": order.order_id, "amount": str(order.amount)}


STAMP = ToolSpec(
    name="test_stamp_order", description="Stamp an order (test tool).", parameters=StampOrder, execute=_stamp,
    risk="LOW", idempotency_key=lambda ctx, p: key_hash(ctx.tenant_id, ctx.conversation_id, "stamp", p.order_id),
    business_result_id=lambda data: data["order_id"],
)


def test_fifty_identical_calls_execute_once_and_hit_49_times(transactional_db, requester, install_tool):
    # given: a LOW tool (no confirmation) with an idempotency key
    install_tool(STAMP, users=[requester])
    before = Order.objects.get(tenant=requester.tenant, order_id=ORDER).amount
    conversation = conversation_create(user=requester)
    message = assistant(("call_stamp", "test_stamp_order", {"order_id": ORDER}))

    def prepare(_):
        return tool_context(User.objects.select_related("tenant").get(pk=requester.pk), conversation.pk)

    # when: 50 threads make the same call at once
    results = race(50, prepare, lambda ctx: ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result)

    # then: one execution, one record, 49 idempotent hits with the same result
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).amount == before + Decimal("1")
    record = IdempotencyRecord.objects.get()
    assert record.status == IdempotencyRecord.Status.SUCCEEDED and record.tool_name == "test_stamp_order"
    decisions = Counter(r.decision for r in audit_rows(tool_name="test_stamp_order"))
    assert decisions == {"EXECUTED": 1, "IDEMPOTENT_HIT": 49}
    assert {(r.success, r.data["amount"]) for r in results} == {(True, str(before + 1))}
