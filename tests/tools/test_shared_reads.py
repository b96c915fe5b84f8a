"""core.sql.select.shared_reads: inside it an unlocked select_rows repeated with the same parameters
is answered from the first reading; locked reads, other parameters and anything outside the block
go to the database. A gated cancellation reads its order once before a human is asked (the
precheck's reading serves the approval context), and the re-checks at consume time still read it."""
from __future__ import annotations

import uuid

from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import ConfirmationRequest
from core.sql.select import select_rows, shared_reads
from tests.tools.support import ORDER, assistant, tool_context
from tools.catalog.models import Order
from tools.manager import ToolCallingManager


def _order_reads(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries
            if q["sql"].lstrip().upper().startswith("SELECT") and 'FROM "catalog_order"' in q["sql"]]


def test_a_repeated_read_inside_the_block_is_answered_from_the_first(db, requester):
    where = {"tenant_id": requester.tenant_id, "order_id": ORDER}
    with CaptureQueriesContext(connection) as captured, shared_reads():
        [first] = select_rows(Order, where)
        [second] = select_rows(Order, where)
        other = select_rows(Order, {"tenant_id": requester.tenant_id, "order_id": "A000000000000"})
        [locked] = select_rows(Order, where, for_update=True)
    assert len(_order_reads(captured)) == 3  # the first, the other order, the locked one
    assert other == []
    assert second is not first and second.pk == first.pk == locked.pk
    assert second.status == first.status and second.amount == first.amount
    second.items.append({"sku": "changed"})  # JSON values are copies: the first instance keeps its own
    assert first.items != second.items

    with CaptureQueriesContext(connection) as captured:
        select_rows(Order, where)
    assert len(_order_reads(captured)) == 1  # nothing kept after the block


def test_a_memo_is_shared_again_only_when_passed(db, requester):
    where = {"tenant_id": requester.tenant_id, "order_id": ORDER}
    with shared_reads() as memo:
        select_rows(Order, where)
    Order.objects.filter(tenant_id=requester.tenant_id, order_id=ORDER).update(customer_name="Changed Name")
    with CaptureQueriesContext(connection) as captured:
        with shared_reads(memo):
            [again] = select_rows(Order, where)
        with shared_reads():
            [fresh] = select_rows(Order, where)
    assert len(_order_reads(captured)) == 1
    assert again.customer_name != "Changed Name" and fresh.customer_name == "Changed Name"


def test_a_gated_cancellation_reads_its_order_once_before_asking(db, requester):
    ctx = tool_context(requester, uuid.uuid4())
    with CaptureQueriesContext(connection) as captured:
        result = ToolCallingManager().execute_tool_calls(
            ctx, assistant(("c1", "cancel_order", {"order_id": ORDER, "reason": "the customer changed their mind"})))
    [pending] = result.pending
    assert len(_order_reads(captured)) == 1  # the precheck's reading, shared with the approval context
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert request.approval_context["facts"]["order_id"] == ORDER
    assert request.approval_context["facts"]["order_status"] == Order.Status.PAID


def test_a_cancellation_that_cannot_succeed_is_refused_before_asking(db, requester):
    Order.objects.filter(tenant_id=requester.tenant_id, order_id=ORDER).update(status=Order.Status.SHIPPED)
    ctx = tool_context(requester, uuid.uuid4())
    result = ToolCallingManager().execute_tool_calls(
        ctx, assistant(("c1", "cancel_order", {"order_id": ORDER, "reason": "the customer changed their mind"})))
    assert not result.pending
    assert result.outcomes[0].result.code == "ORDER_NOT_CANCELLABLE"
    assert not ConfirmationRequest.objects.exists()
