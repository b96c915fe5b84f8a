"""A decided call sent back to approvers because its policy became stricter, as the requester sees
it in Chromium: a sentence in both languages in the conversation, and the card switching from
"Confirmed" (or a reached quorum) to "waiting for approvers n / quorum" — live, after a reload, and
as approvals arrive.

Screenshots: test-artifacts/browser/chat-regated-after-confirm.png, chat-regated-after-reload.png,
chat-regated-quorum-raised.png (plus the per-step shots of the Person helper).
"""
from __future__ import annotations

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from tests.browser.conftest import playwright_expect as _expect, named_shot as _named_shot
from tools.catalog.models import Cancellation, Refund
from tools.models import RiskLevel, Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _send(person, text: str) -> None:
    person.page.fill("#message-input", text)
    person.page.click("#send-button")


def test_a_confirmed_call_sent_to_approvers_is_told_in_words_and_the_card_waits(open_person, requester, approver1,
                                                                               approver2):
    expect = _expect()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    _send(alice, "Cancel A202607290001 because the customer changed their mind")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card.locator("[data-testid=confirm]")).to_be_visible()
    # given: while the card waits for Alice, the tool's risk is raised to CRITICAL (2 approvers)
    Tool.objects.filter(name="cancel_order").update(risk_override=RiskLevel.CRITICAL)

    # when: she confirms
    card.locator("[data-testid=confirm]").click()

    # then: she is told in words, in both languages, and the card waits for 2 approvers
    note = alice.page.locator("[data-testid=regate-note]")
    expect(note).to_contain_text("The policy of Cancel an order became stricter after you confirmed: it now needs "
                                 "2 approvers (risk CRITICAL). Your request is waiting for them.")
    expect(note).to_contain_text("您确认后 取消订单 的策略变得更严格：现在需要 2 位审批人")
    expect(note).not_to_contain_text("cancel_order")  # the tool's title, not its wire name
    waiting = alice.page.locator("[data-testid=confirmation-card][data-regated=APPROVERS_NOW]")
    expect(card).to_have_count(1)  # the confirmed card was replaced, not left beside it
    expect(waiting.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")
    expect(waiting).to_contain_text("Waiting for approvers / 等待审批人")
    expect(waiting.locator("[data-testid=card-reason]")).to_contain_text("Sent back to approvers")
    expect(waiting).not_to_contain_text("Confirmed")
    expect(waiting.locator("[data-testid=confirm]")).to_have_count(0)
    expect(alice.page.locator(".step.waiting")).to_contain_text("waiting for approvers")
    _named_shot(alice, "chat-regated-after-confirm.png")
    assert not Cancellation.objects.exists()

    # and after a reload the conversation says the same
    alice.page.reload()
    expect(alice.page.locator("[data-testid=regate-note]")).to_contain_text("became stricter after you confirmed")
    waiting = alice.page.locator("[data-testid=confirmation-card][data-regated=APPROVERS_NOW]")
    expect(waiting.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")
    expect(alice.page.locator("[data-testid=confirmation-card]")).to_have_count(1)
    _named_shot(alice, "chat-regated-after-reload.png")
    # ... and so does her requests page
    alice.goto("/approvals/mine/")
    mine = alice.page.locator("[data-testid=my-request]").filter(has_text="cancel_order")
    expect(mine.locator("[data-testid=regated]")).to_contain_text("became stricter after you confirmed")
    expect(mine.locator("[data-testid=regated]")).to_contain_text("您确认后 cancel_order 的策略变得更严格")
    expect(mine.locator("[data-testid=quorum]")).to_have_text("0 / 2")
    alice.page.go_back()
    waiting = alice.page.locator("[data-testid=confirmation-card][data-regated=APPROVERS_NOW]")
    expect(waiting.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")

    # the count follows the approvers, and the call runs once when the quorum is met
    request = ConfirmationRequest.objects.get(user=requester, tool_name="cancel_order")
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver1)
    expect(waiting.locator("[data-testid=approvals-count]")).to_have_text("1 / 2", timeout=15_000)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver2)
    expect(waiting).to_contain_text("Done — it ran once.", timeout=15_000)
    assert Cancellation.objects.count() == 1
    assert not alice.console_errors, alice.console_errors


def test_a_quorum_raised_after_approval_is_told_and_the_card_counts_again(open_person, requester, approver1,
                                                                         approver2):
    expect = _expect()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    _send(alice, "Refund A202607290003 amount 50 because it arrived broken")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")
    request = ConfirmationRequest.objects.get(user=requester, tool_name="refund_order")

    # given: one approval, then the quorum is raised to 3; when: the second approval completes
    # the old quorum and the resume finds it short
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver1)
    Tool.objects.filter(name="refund_order").update(quorum=3)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver2)

    # then
    note = alice.page.locator("[data-testid=regate-note]")
    expect(note).to_contain_text("The policy of Refund an order became stricter after it was approved: it now needs "
                                 "3 approvers and 2 of them count so far.", timeout=15_000)
    expect(note).to_contain_text("审批通过后 订单退款 的策略变得更严格")
    waiting = alice.page.locator("[data-testid=confirmation-card][data-regated=QUORUM_RAISED]")
    expect(waiting.locator("[data-testid=approvals-count]")).to_have_text("2 / 3")
    expect(card).to_have_count(1)
    _named_shot(alice, "chat-regated-quorum-raised.png")
    assert not Refund.objects.exists()
    assert not alice.console_errors, alice.console_errors
