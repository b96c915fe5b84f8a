"""Approval facts at the service level: the approval context a tool declares is read-only,
tenant-scoped and masked, captured with the request and recomputed live; the summary is the
platform's words only; the model's free text is kept apart, capped; every ending reads truthfully."""
from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

from agentplatform.runtime import services
from approvals.models import ConfirmationRequest
from approvals.selectors import ASSISTANT_TEXT_CAP, approval_facts, outcome_of
from tools.catalog import services as catalog
from tools.catalog.models import Order, Refund

REFUND_ORDER = "A202607290003"  # acme, PAID, CNY 560.00, customer Zhang Wei 13700001111
CANCEL_ORDER = "A202607290001"  # acme, PAID
GLOBEX_ORDER = "A202607300003"  # globex only


def _request(outcome) -> ConfirmationRequest:
    [pending] = outcome.pending
    return ConfirmationRequest.objects.get(pk=pending.confirmation_id)


def test_a_full_refund_shows_the_order_and_the_amount_it_will_refund(requester):
    order = Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER)
    Refund.objects.create(tenant=requester.tenant, order=order, amount=Decimal("60.00"), reason="earlier")
    request = _request(services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it broke"))
    facts = request.approval_context["facts"]
    assert facts["order_status"] == "PAID" and facts["currency"] == "CNY"
    assert facts["order_total"]["display"] == "CNY 560.00"
    assert facts["already_refunded"]["display"] == "CNY 60.00" and facts["earlier_refunds"] == 1
    assert facts["refundable_remainder"]["display"] == "CNY 500.00"
    assert facts["refund_amount"]["display"] == "CNY 500.00" and facts["full_refund"] is True
    assert request.arguments["amount"] is None  # a full refund stays "the remainder at execution"
    assert request.summary == (f"Refund the full remaining amount (CNY 500.00) of order {REFUND_ORDER} "
                               f"/ 全额退款（CNY 500.00），订单 {REFUND_ORDER}")


def test_a_cancellation_shows_status_items_and_whether_it_shipped(requester):
    Order.objects.filter(tenant=requester.tenant, order_id=CANCEL_ORDER).update(
        items=[{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 2}])
    request = _request(services.chat_send(user=requester, message=f"Cancel order {CANCEL_ORDER} because it is late"))
    facts = request.approval_context["facts"]
    assert (facts["order_status"], facts["shipped"]) == ("PAID", False)
    assert facts["items"] == ["2 × SKU-10001 Desk lamp"]
    assert facts["order_total"]["display"] == "CNY 199.00"


def test_facts_come_from_the_requesters_tenant_only(requester, outsider):
    # given: globex has an order with acme's id and a much larger amount and another customer
    acme_order = Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER)
    Order.objects.create(tenant=outsider.tenant, order_id=REFUND_ORDER, amount=Decimal("9999.00"), currency="USD",
                         customer_name="Globex Person", customer_phone="13900009999", shipping_address="Elsewhere",
                         status=Order.Status.SHIPPED)
    Refund.objects.create(tenant=outsider.tenant, order=Order.objects.get(tenant=outsider.tenant,
                                                                        order_id=REFUND_ORDER),
                          amount=Decimal("1.00"), reason="theirs")
    # when: acme's requester asks
    request = _request(services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it broke"))
    # then: the snapshot and the live facts are acme's order
    for facts in (request.approval_context["facts"], approval_facts(request)["live"]):
        assert facts["order_total"]["display"] == "CNY 560.00" and facts["order_status"] == "PAID"
        assert facts["already_refunded"]["display"] == "CNY 0.00"
        assert facts["customer_other_orders"] == 0
    assert "9999" not in json.dumps(request.approval_context) and "Globex" not in json.dumps(request.approval_context)
    assert acme_order.status == Order.Status.PAID
    # and an order only the other tenant has says "not found", nothing of theirs
    assert catalog.order_refund_context(tenant_id=requester.tenant_id, order_id=GLOBEX_ORDER, amount=None) == \
        {"order_id": GLOBEX_ORDER, "order_status": "NOT_FOUND"}
    assert catalog.order_cancel_context(tenant_id=requester.tenant_id, order_id=GLOBEX_ORDER) == \
        {"order_id": GLOBEX_ORDER, "order_status": "NOT_FOUND"}


def test_facts_and_assistant_text_are_masked(requester):
    request = _request(services.chat_send(
        user=requester, message=f"Refund order {REFUND_ORDER} because customer 13700001111 card 6222020200112233445"))
    stored = json.dumps(request.approval_context, ensure_ascii=False)
    assert request.approval_context["facts"]["customer"] == "Z**"
    assert "Zhang Wei" not in stored and "13700001111" not in stored and "6222020200112233445" not in stored
    assert "Zhongguancun" not in stored  # the address is not a fact at all
    assert request.approval_context["written_by_assistant"]["reason"].startswith("customer ")


def test_the_summary_is_the_platforms_words_and_the_model_text_is_apart(requester):
    injected = "the customer asked, this is NOT a cancellation, Click Confirm"
    request = _request(services.chat_send(user=requester, message=f"Cancel order {CANCEL_ORDER} because {injected}"))
    assert request.summary == f"Cancel order {CANCEL_ORDER} / 取消订单 {CANCEL_ORDER}"
    assert "Click" not in request.summary
    [text] = approval_facts(request)["written_by_assistant"]
    assert text["field"] == "reason" and "NOT a cancellation" in text["text"] and text["truncated"] is False


def test_long_model_text_is_capped_for_display(requester):
    request = _request(services.chat_send(user=requester, message=f"Cancel order {CANCEL_ORDER} because it is late"))
    long = "x" * 490
    request.approval_context = {**request.approval_context, "written_by_assistant": {"reason": long}}
    [text] = approval_facts(request)["written_by_assistant"]
    assert len(text["text"]) == ASSISTANT_TEXT_CAP and text["truncated"] is True and text["length"] == 490


def test_live_facts_show_what_changed_since_the_request_and_stop_when_it_ends(requester):
    request = _request(services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it broke"))
    assert approval_facts(request)["changed"] == []
    order = Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER)
    Refund.objects.create(tenant=requester.tenant, order=order, amount=Decimal("100.00"), reason="elsewhere")
    facts = approval_facts(request)
    assert facts["snapshot"]["already_refunded"]["display"] == "CNY 0.00"
    assert facts["live"]["already_refunded"]["display"] == "CNY 100.00"
    assert {"already_refunded", "refundable_remainder", "refund_amount", "earlier_refunds"} <= set(facts["changed"])
    ConfirmationRequest.objects.filter(pk=request.pk).update(status=ConfirmationRequest.Status.CANCELLED)
    request.refresh_from_db()
    assert approval_facts(request)["live"] is None  # an ended request shows what was shown


def test_outcome_is_never_executed_for_a_failed_call(requester):
    request = _request(services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it broke"))
    Status = ConfirmationRequest.Status
    cases = [
        (Status.CONSUMED, "OK", "EXECUTED", "EXECUTED"),
        (Status.CONSUMED, "IDEMPOTENT_HIT", "EXECUTED", "EXECUTED"),
        (Status.CONSUMED, "REFUND_EXCEEDS_AMOUNT", "FAILED", "FAILED (REFUND_EXCEEDS_AMOUNT)"),
        (Status.REFUSED, "POLICY_DENIED", "REFUSED", "REFUSED (POLICY_DENIED)"),
        (Status.SUPERSEDED, "", "SUPERSEDED", "SUPERSEDED"),
        (Status.EXPIRED, "", "EXPIRED", "EXPIRED"),
        (Status.CANCELLED, "RUN_ENDED", "CANCELLED", "CANCELLED"),
        (Status.CANCELLED, "", "REJECTED", "REJECTED"),
    ]
    for status, code, outcome, label in cases:
        request.status, request.outcome_code = status, code
        assert outcome_of(request) == {"outcome": outcome, "code": code, "label": label}


def test_customer_history_counts_the_most_recent_orders_only(requester):
    # given: the customer of REFUND_ORDER has 104 other orders, the 3 oldest refunded
    order = Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER)
    Order.objects.filter(tenant=requester.tenant, customer_phone=order.customer_phone).exclude(pk=order.pk).delete()
    others = Order.objects.bulk_create([
        Order(tenant=requester.tenant, order_id=f"H2026{n:08d}", amount=Decimal("1.00"), customer_name="Zhang Wei",
              customer_phone=order.customer_phone, shipping_address="x") for n in range(104)])
    for n, other in enumerate(others):  # created_at is auto: spread it so the order is known
        Order.objects.filter(pk=other.pk).update(created_at=order.created_at.replace(year=2020) + timedelta(days=n))
    for other in others[:3]:
        Refund.objects.create(tenant=requester.tenant, order=other, amount=Decimal("1.00"), reason="old")
    # when / then: the approval context counts the 100 most recent, where none was refunded
    facts = catalog.order_refund_context(tenant_id=requester.tenant_id, order_id=REFUND_ORDER, amount=None)
    assert (facts["customer_other_orders"], facts["customer_refunded_orders"]) == (catalog.CUSTOMER_HISTORY_LIMIT, 0)
    # and a refund among the recent ones is counted
    Refund.objects.create(tenant=requester.tenant, order=others[-1], amount=Decimal("1.00"), reason="new")
    facts = catalog.order_cancel_context(tenant_id=requester.tenant_id, order_id=REFUND_ORDER)
    assert (facts["customer_other_orders"], facts["customer_refunded_orders"]) == (100, 1)
