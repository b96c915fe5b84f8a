"""The approval card as approvers and a requester see it, in Chromium: the approval card
shows the order's facts beside the arguments (live, with what changed), the amount in its
canonical form with its currency, the model's own words quoted and labelled apart from the
platform's summary, and the history shows the real outcome (never EXECUTED for a refused or failed
call).

Screenshots: test-artifacts/browser/approval-card-refund.png, approval-card-full-refund.png,
approval-card-changed.png, approval-history-refused.png, approval-history-failed.png,
chat-card-assistant-text.png (plus the per-step shots of the Person helper).
"""
from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.models import ConfirmationRequest
from tests.browser.conftest import ARTIFACTS, playwright_expect as _expect
from tests.llm.fake_openai_server import completion, function_call, json_response
from tools.catalog.models import Order, Refund

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUND_ORDER = "A202607290003"  # acme, PAID, CNY 560.00
FULL_ORDER = "A202607290004"  # acme, COMPLETED, CNY 42.00
INJECTED = "Customer is VIP. This is NOT a refund, it is a courtesy credit. Just click Approve"


def _named_shot(person, name: str) -> None:
    """A screenshot under a name the issue's note refers to (besides the per-step ones)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    person.page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def _refund_call(call_id: str, order_id: str, amount_json: str | None, reason: str):
    args = {"order_id": order_id, "reason": reason}
    text = json.dumps(args)
    if amount_json is not None:
        text = text[:-1] + f', "amount": {amount_json}}}'
    return json_response(completion(tool_calls=[function_call(call_id, "refund_order", text)],
                                    finish_reason="tool_calls"))


def _card(person, request_id):
    """The request's line in the inbox list."""
    return person.page.locator(f"[data-request-id='{request_id}']")


def _open(person, request_id, tab: str = ""):
    """Open the request in the inbox's pane (on `tab`, default "waiting for me"): the pane."""
    person.goto(f"/approvals/?{'tab=' + tab + '&' if tab else ''}open={request_id}")
    return person.page.locator(f"[data-pane-for='{request_id}']")


def test_approvers_decide_with_the_facts_and_history_tells_the_real_outcome(open_person, requester, approver1,
                                                                            approver2, scripted_model):
    expect = _expect()
    tenant = requester.tenant
    order = Order.objects.get(tenant=tenant, order_id=REFUND_ORDER)
    Refund.objects.create(tenant=tenant, order=order, amount=Decimal("60.00"), reason="earlier, by phone")
    # given: the model asks to refund "1e2" with a reason that tries to talk the approver round,
    # and a full refund of another order (no amount)
    scripted_model.enqueue(_refund_call("call_1", REFUND_ORDER, '"1e2"', INJECTED))
    partial = services.chat_send(user=requester, message=f"refund {REFUND_ORDER}").pending[0]
    scripted_model.enqueue(_refund_call("call_2", FULL_ORDER, None, "wrong colour"))
    full = services.chat_send(user=requester, message=f"refund {FULL_ORDER} in full").pending[0]
    scripted_model.enqueue(*[json_response(completion(content="Noted.")) for _ in range(4)])

    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    card = _open(bob, partial.confirmation_id)
    # item 2: the canonical amount with its currency, never "1E+2"
    expect(card.locator("[data-testid=summary]")).to_have_text(
        f"Refund CNY 100.00 of order {REFUND_ORDER} / 退款 CNY 100.00，订单 {REFUND_ORDER}")
    expect(card.locator("[data-testid=arguments]")).to_contain_text("100.00")
    expect(card).not_to_contain_text("1E+2")
    # item 1: the facts beside the arguments
    facts = card.locator("[data-testid=facts]")
    expect(facts.locator("[data-fact=order_total] td")).to_have_text("CNY 560.00")
    expect(facts.locator("[data-fact=order_status] td")).to_have_text("PAID")
    expect(facts.locator("[data-fact=already_refunded] td")).to_have_text("CNY 60.00")
    expect(facts.locator("[data-fact=earlier_refunds] td")).to_have_text("1")
    expect(facts.locator("[data-fact=refundable_remainder] td")).to_have_text("CNY 500.00")
    expect(facts.locator("[data-fact=refund_amount] td")).to_have_text("CNY 100.00")
    expect(facts.locator("[data-fact=customer] td")).to_have_text("Z**")
    # item 7: the model's words are quoted and labelled, and not part of the summary
    words = card.locator("[data-testid=assistant-text]")
    expect(words).to_contain_text("Written by the assistant")
    expect(words.locator("blockquote")).to_have_text(f"“{INJECTED}”")
    expect(card.locator("[data-testid=summary]")).not_to_contain_text("click Approve")
    expect(card.locator("[data-testid=arguments]")).not_to_contain_text("courtesy")
    card.scroll_into_view_if_needed()
    _named_shot(bob, "approval-card-refund.png")

    # a full refund shows the amount it will refund, not "amount: null"
    full_card = _open(bob, full.confirmation_id)
    expect(full_card.locator("[data-testid=summary]")).to_contain_text(
        f"Refund the full remaining amount (CNY 42.00) of order {FULL_ORDER}")
    expect(full_card.locator("[data-fact=refund_amount] td")).to_have_text("CNY 42.00")
    expect(full_card.locator("[data-testid=arguments]")).to_contain_text("not given")
    expect(full_card.locator("[data-testid=arguments]")).not_to_contain_text("null")
    full_card.scroll_into_view_if_needed()
    _named_shot(bob, "approval-card-full-refund.png")

    # the first approver approves the 100.00 refund
    card = _open(bob, partial.confirmation_id)
    card.locator("[data-testid=approve]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Approved (1/2)")

    # meanwhile 450 is refunded by another channel: the second approver sees what changed
    Refund.objects.create(tenant=tenant, order=order, amount=Decimal("450.00"), reason="by phone")
    carol = open_person("approver2")
    carol.sign_in(approver2.username, DEMO_PASSWORD, next_path="/approvals/")
    carol_card = _open(carol, partial.confirmation_id)
    remainder = carol_card.locator("[data-fact=refundable_remainder]")
    expect(remainder).to_have_class("fact-changed")
    expect(remainder.locator("td")).to_contain_text("CNY 50.00")
    expect(remainder.locator("td")).to_contain_text("was CNY 500.00")
    carol_card.scroll_into_view_if_needed()
    _named_shot(carol, "approval-card-changed.png")

    # she approves anyway: quorum, but the refund exceeds what is left, so nothing runs
    carol_card.locator("[data-testid=approve]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("quorum reached")
    assert Refund.objects.filter(tenant=tenant, order=order).count() == 2  # nothing new
    carol.page.click("[data-testid=tab-history]")
    status = _card(carol, partial.confirmation_id).locator("[data-testid=status]")
    expect(status).to_have_text("REFUSED (REFUND_EXCEEDS_AMOUNT)")
    expect(status).to_have_attribute("data-outcome", "REFUSED")
    expect(_open(carol, partial.confirmation_id, tab="decided").locator("[data-fact=already_refunded] td")).to_have_text(
        "CNY 60.00")  # an ended request shows what was shown when it was requested
    _named_shot(carol, "approval-history-refused.png")

    # a call that ran and failed reads FAILED with its code, never EXECUTED
    ConfirmationRequest.objects.filter(pk=full.confirmation_id).update(
        status=ConfirmationRequest.Status.CONSUMED, outcome_code="PAYMENT_GATEWAY_DECLINED")
    bob.page.click("[data-testid=tab-history]")
    failed = _card(bob, full.confirmation_id).locator("[data-testid=status]")
    expect(failed).to_have_text("FAILED (PAYMENT_GATEWAY_DECLINED)")
    expect(bob.page.locator("[data-testid=status]", has_text="EXECUTED")).to_have_count(0)
    _named_shot(bob, "approval-history-failed.png")
    assert bob.console_errors == [] and carol.console_errors == []


def test_the_requesters_card_keeps_the_models_words_apart(open_person, requester):
    expect = _expect()
    Order.objects.filter(tenant=requester.tenant, order_id="A202607290001").update(
        items=[{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 1}])
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    alice.page.fill("#message-input",
                    "Cancel A202607290001 because the customer asked, this is NOT a cancellation, Click Confirm")
    alice.page.click("#send-button")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card.locator(".card-summary")).to_have_text("Cancel order A202607290001 / 取消订单 A202607290001")
    words = card.locator("[data-testid=assistant-text]")
    expect(words).to_contain_text("Written by the assistant")
    expect(words.locator("blockquote")).to_have_text(
        "“the customer asked, this is NOT a cancellation, Click Confirm”")
    facts = card.locator("[data-testid=card-facts]")
    expect(facts).to_contain_text("PAID")
    expect(facts).to_contain_text("No / 否")  # not shipped
    expect(facts).to_contain_text("1 × SKU-10001 Desk lamp")
    _named_shot(alice, "chat-card-assistant-text.png")
    assert alice.console_errors == []
