"""In Chromium: the chat remembers. Decision cards come back after a reload with who decided, their
reason and the arguments that ran (an edit as old → new), in the same words as the live card;
people read tool titles and words, never wire names, codes or ids; suggestions follow the tools
offered now; the navigation shows only what the person can use; the chat fits a phone and axe
finds nothing serious.

Screenshots (test-artifacts/browser/): chat-remembers-live.png, chat-remembers-reloaded.png,
chat-chips-follow-tools.png, phone-chat-remembers.png.
"""
from __future__ import annotations

import re

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD, TRY_ORDERS, order_id
from approvals import amendments, approver_actions
from approvals.models import ConfirmationRequest
from tests.browser.conftest import PHONE, named_shot as _named_shot, playwright_expect as _expect
from tests.browser.test_newcomers import _axe, _no_horizontal_scroll
from tools.catalog.models import Order, Refund
from tools.models import TenantToolPolicy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EDITED_ORDER = "A202607290003"
REJECTED_ORDER = "A202607290001"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NEVER_SHOWN = ("refund_order", "cancel_order", "query_inventory", "SUPERSEDED", "TOOL_NOT_FOUND", "CANCELLED",
               "REJECTED", "approver(s)")


def _send(person, text: str) -> None:
    person.page.fill("#message-input", text)
    person.page.click("#send-button")


def _request(order: str) -> ConfirmationRequest:
    return ConfirmationRequest.objects.filter(business_object=f"order:{order}").latest("created_at")


def _people_read_no_codes(person) -> None:
    text = person.page.locator("#chat-app").inner_text()
    for word in NEVER_SHOWN:
        assert word not in text, f"{word!r} reached the page"
    assert not UUID.search(text), "an id reached the page"


def test_a_reload_keeps_a_rejections_name_and_reason_and_an_edits_old_to_new(
        open_person, requester, approver1, approver2):
    expect = _expect()
    approver1.first_name, approver1.last_name = "Bob", "Brown"
    approver1.save()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path="/chat/")

    # given: a refund of 30 that Bob lowers to 20 and approver2 approves: it runs once, with 20
    _send(alice, f"Refund {EDITED_ORDER} amount 30 because the item arrived damaged")
    cards = alice.page.locator("[data-testid=confirmation-card]")
    expect(cards.first.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")
    refund = _request(EDITED_ORDER)
    edited = amendments.confirmation_edit(
        request_id=refund.pk, editor=approver1, base_arguments_hash=refund.arguments_hash,
        arguments={**refund.arguments, "amount": "20"}, comment="only the damaged part")
    approver_actions.confirmation_approve(request_id=refund.pk, approver=approver2,
                                          arguments_hash=edited.arguments_hash)
    live_edit = cards.first.locator("[data-testid=card-edited]")
    expect(live_edit).to_contain_text("CNY 30.00 → CNY 20.00", timeout=20_000)
    expect(cards.first).to_contain_text("Done — it ran once.")
    assert [str(r.amount) for r in Refund.objects.all()] == ["20.00"]

    # and: a second refund that Bob rejects with a reason
    _send(alice, f"Refund {REJECTED_ORDER} amount 40 because the customer asked")
    expect(cards).to_have_count(2)
    approver_actions.confirmation_reject(request_id=_request(REJECTED_ORDER).pk, approver=approver1,
                                         reason="fraud suspected")
    rejected = cards.nth(1)
    expect(rejected).to_contain_text("Rejected by Bob Brown", timeout=20_000)
    expect(rejected).to_contain_text("fraud suspected")
    expect(rejected.locator("[data-testid=card-status]")).to_contain_text("Rejected by Bob Brown")
    expect(alice.page.locator("[data-testid=final-answer]").last).to_contain_text("fraud suspected")
    expect(alice.page.locator("[data-testid=final-answer]").last).to_contain_text("rejected by Bob Brown")
    live = [cards.nth(i).locator("[data-testid=card-status]").inner_text() for i in range(2)]
    live_edit_text = live_edit.inner_text()
    _named_shot(alice, "chat-remembers-live.png")

    # when: the page is reloaded
    alice.page.reload()

    # then: both cards are rebuilt from the stored requests, with the same words
    expect(cards).to_have_count(2)
    first, second = cards.nth(0), cards.nth(1)
    expect(first.locator("[data-testid=card-edited]")).to_have_text(live_edit_text)
    expect(first.locator("[data-testid=card-edited]")).to_contain_text("Bob Brown")
    expect(first.locator(".card-summary")).to_contain_text(f"Refund CNY 20.00 of order {EDITED_ORDER}")
    expect(first.locator("[data-testid=card-decisions]")).to_contain_text("only the damaged part")
    expect(second.locator("[data-testid=card-status]")).to_contain_text("Rejected by Bob Brown")
    expect(second.locator("[data-testid=card-status]")).to_contain_text("fraud suspected")
    assert [cards.nth(i).locator("[data-testid=card-status]").inner_text() for i in range(2)] == live
    expect(first.locator(".card-tool")).to_have_text("Refund an order / 订单退款")
    expect(first.locator("[data-testid=card-time]")).to_have_text(re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}$"))
    # the cards stand after the message that asked, before the answer
    order = alice.page.evaluate("""() => Array.from(document.querySelectorAll('#messages > .msg'))
        .map(m => m.classList.contains('msg-user') ? 'user' : (m.querySelector('.confirm-card') ? 'card' : 'answer'))""")
    assert order == ["user", "card", "answer", "user", "card", "answer"], order
    _people_read_no_codes(alice)
    # the list says where each conversation stands and finds it by what Alice wrote
    expect(alice.page.locator("[data-testid=conversation-status]").first).to_have_text("Answered / 已回复")
    alice.page.fill("#conversation-search", "no such words")
    expect(alice.page.locator("#conversation-list .conversation")).to_have_count(0)
    alice.page.fill("#conversation-search", REJECTED_ORDER)
    expect(alice.page.locator("#conversation-list .conversation")).to_have_count(1)
    _named_shot(alice, "chat-remembers-reloaded.png")
    assert alice.console_errors == []


def test_chips_and_answers_follow_the_tools_offered_now(open_person, requester, approver1):
    expect = _expect()
    tenant = requester.tenant
    cancel_en, refund, cancel_zh = (order_id("acme", TRY_ORDERS[k]) for k in ("cancel", "refund", "cancel_zh"))
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path="/chat/")
    chips = alice.page.locator("[data-testid=suggestions] .chip")
    expect(chips.filter(has_text=cancel_en)).to_have_count(1)
    expect(chips.filter(has_text=cancel_zh)).to_have_count(1)
    # a requester who may not approve sees no Approvals tab; My requests is there
    expect(alice.page.locator("[data-testid=nav-approvals]")).to_have_count(0)
    expect(alice.page.locator("[data-testid=nav-my-requests]")).to_have_count(1)

    # when: an administrator disables cancel_order for the tenant, and the order behind the
    # Chinese chip is cancelled meanwhile
    TenantToolPolicy.objects.filter(tenant=tenant, tool__name="cancel_order").update(enabled=False)
    Order.objects.filter(tenant=tenant, order_id=cancel_zh).update(status=Order.Status.CANCELLED)
    alice.page.reload()

    # then: no chip offers a cancellation, the refund chip stays
    expect(chips.filter(has_text=refund)).to_have_count(1)
    expect(chips.filter(has_text=cancel_en)).to_have_count(0)
    expect(chips.filter(has_text=cancel_zh)).to_have_count(0)
    expect(chips.filter(has_text=re.compile("Cancel|取消"))).to_have_count(0)
    # and asking anyway gets words, not the pipeline's code or instructions to the model
    _send(alice, f"Cancel {cancel_en} because the customer changed their mind")
    final = alice.page.locator("[data-testid=final-answer]")
    expect(final).to_contain_text("not among the actions offered to you")
    expect(alice.page.locator(".step.failed .step-name")).to_have_text("Cancel an order / 取消订单")
    expect(alice.page.locator("#messages")).not_to_contain_text("use only the offered tools")
    _people_read_no_codes(alice)
    _named_shot(alice, "chips-follow-tools.png")

    # an approver sees the Approvals tab (and no My requests: no tool is offered to them)
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/chat/")
    expect(bob.page.locator("[data-testid=nav-approvals]")).to_have_count(1)
    expect(bob.page.locator("[data-testid=nav-my-requests]")).to_have_count(0)
    assert alice.console_errors == [] and bob.console_errors == []


def test_the_chat_with_rebuilt_cards_fits_a_phone_and_has_no_serious_axe_violations(
        open_person, requester, approver1):
    expect = _expect()
    alice = open_person("phone-requester", **PHONE)
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path="/chat/")
    _send(alice, f"Refund {REJECTED_ORDER} amount 40 because the customer asked for it after a long wait")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")
    approver_actions.confirmation_reject(request_id=_request(REJECTED_ORDER).pk, approver=approver1,
                                         reason="the customer's account is under review for repeated refunds")
    expect(card).to_contain_text("Rejected by", timeout=20_000)
    _send(alice, "Cancel A202607290005 because the customer changed their mind")
    expect(card).to_have_count(2)

    alice.page.reload()
    expect(card).to_have_count(2)
    expect(card.first).to_contain_text("under review for repeated refunds")
    expect(card.nth(1).locator("[data-testid=confirm]")).to_be_visible()  # still decidable after the reload
    _no_horizontal_scroll(alice)
    _named_shot(alice, "phone-chat-remembers.png")
    problems = _axe(alice, "chat-phone-rebuilt")
    alice.page.set_viewport_size({"width": 1360, "height": 900})
    problems += _axe(alice, "chat-rebuilt")
    assert problems == [], "\n".join(problems)
    assert alice.console_errors == []
