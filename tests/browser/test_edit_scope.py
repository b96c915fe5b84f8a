"""In Chromium: the requester asks in the chat for a refund of 30; an approver lowers it to 20 on
the dashboard (the only arguments offered are the amount, at most 30, and the reason); another
approver approves; the requester's open chat card then shows the call that ran, 20, and who
edited it, without a reload (and the answer kept in the conversation says the same).

Screenshots (test-artifacts/browser/): edit-scope-form.png, edit-scope-chat-card.png.
"""
from __future__ import annotations

from decimal import Decimal

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.models import ConfirmationRequest
from tests.browser.conftest import playwright_expect as _expect, named_shot as _named_shot
from tools.catalog.models import Refund

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUND_ORDER = "A202607290003"  # acme, PAID, CNY 560.00
EVENT_WAIT_MS = 20_000  # the run resumes after the approval commits; the stream delivers its events


def test_the_requesters_card_shows_the_edited_call_that_ran(open_person, requester, approver1, approver2):
    expect = _expect()
    # the requester asks for 30 in their chat; the card says 30
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    expect(alice.page).to_have_url(f"{alice.base_url}/chat/")
    alice.page.fill("#message-input", f"Refund {REFUND_ORDER} amount 30 because one chair arrived broken")
    alice.page.click("#send-button")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card).to_be_visible()
    expect(card.locator(".card-summary")).to_contain_text(f"Refund CNY 30.00 of order {REFUND_ORDER}")
    request = ConfirmationRequest.objects.get(tool_name="refund_order", status="PENDING")
    alice.page.evaluate("window.__sameDocument = true")

    # approver1 may change the amount (at most 30) and the reason, never the order; lowers it to 20
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    bob_card = bob.page.locator(f"[data-pane-for='{request.pk}']")
    bob_card.locator("[data-testid=edit] summary").click()
    expect(bob_card.locator("[data-testid=edit-order_id]")).to_have_count(0)
    expect(bob_card.locator("[data-testid=edit-limit-amount]")).to_contain_text("at most 30.00")
    bob_card.locator("[data-testid=edit-amount]").fill("20")
    bob_card.locator("input[name=comment]").fill("only one chair is broken")
    bob_card.scroll_into_view_if_needed()
    _named_shot(bob, "edit-scope-form.png")
    bob_card.locator("[data-testid=edit-submit]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Another approver must approve")

    # approver2 approves the edited call
    carol = open_person("approver2")
    carol.sign_in(approver2.username, DEMO_PASSWORD, next_path="/approvals/")
    carol_card = carol.page.locator(f"[data-pane-for='{request.pk}']")
    expect(carol_card.locator("[data-testid=summary]")).to_contain_text(f"Refund CNY 20.00 of order {REFUND_ORDER}")
    carol_card.locator("[data-testid=approve]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("quorum reached")

    # the edited call ran once, and the requester's open card says so: 20, edited by approver1
    [refund] = Refund.objects.all()
    assert refund.amount == Decimal("20.00")
    expect(card).to_have_attribute("data-outcome", "OK", timeout=EVENT_WAIT_MS)
    expect(card.locator(".card-summary")).to_contain_text(f"Refund CNY 20.00 of order {REFUND_ORDER}")
    expect(card.locator(".card-summary")).not_to_contain_text("30.00")
    edited = card.locator("[data-testid=card-edited]")
    expect(edited).to_contain_text(f"Edited by {approver1.username}")
    expect(edited).to_contain_text("Amount / 金额: CNY 30.00 → CNY 20.00")
    expect(card.locator("[data-testid=card-facts]")).to_contain_text("CNY 20.00")
    expect(card.locator(".card-status")).to_contain_text("Arguments edited by " + approver1.username)
    assert alice.page.evaluate("window.__sameDocument === true")  # no reload
    card.scroll_into_view_if_needed()
    _named_shot(alice, "edit-scope-chat-card.png")

    # after a reload the conversation keeps the answer, which names the amount that ran and the edit
    alice.page.reload()
    expect(alice.page.locator("main")).to_contain_text(f"Refunded 20.00 for order {REFUND_ORDER}",
                                                       timeout=EVENT_WAIT_MS)
    expect(alice.page.locator("main")).to_contain_text(f"{approver1.username} changed amount: 30.00 → 20.00")
    assert alice.console_errors == [] and bob.console_errors == [] and carol.console_errors == []
