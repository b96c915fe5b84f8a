"""Live approvals in Chromium: an approver lands on the dashboard, the navigation counts the
requests waiting for them, and the open page follows what happens elsewhere without a reload: a
new request from the requester's browser, another approver's approval and rejection, an expiry.

Screenshots go to test-artifacts/browser/.
"""
from __future__ import annotations

import datetime
import re

import pytest

from core import clock
from agentplatform.runtime import services as runtime
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.models import ConfirmationRequest, RequestClaim
from tests.browser.conftest import playwright_expect as _expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL_WAIT_MS = 15_000  # polls every second here; allow for a loaded machine


@pytest.fixture(autouse=True)
def _fast_poll(settings) -> None:
    settings.APPROVALS_POLL_SECONDS = 1


def _no_reload(person) -> None:
    """Mark the page; a reload would lose the mark."""
    person.page.evaluate("window.__sameDocument = true")


def _same_document(person) -> bool:
    return person.page.evaluate("window.__sameDocument === true")


def test_a_new_request_and_another_approvers_decisions_appear_without_reload(open_person, requester, approver1,
                                                                          approver2):
    expect = _expect()
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)  # no ?next=: an approver starts on the dashboard
    expect(bob.page).to_have_url(f"{bob.base_url}/approvals/")
    expect(bob.page.locator("[data-testid=request-row]")).to_have_count(0)
    expect(bob.page.locator("[data-testid=nav-approvals-count]")).to_be_hidden()  # nothing waits
    _no_reload(bob)
    bob.shot("1-landed-nothing-waits")

    # the requester asks for a refund in their own browser
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    expect(alice.page).to_have_url(f"{alice.base_url}/chat/")
    alice.page.fill("#message-input", "Refund A202607290003 amount 50 because the item arrived damaged")
    alice.page.click("#send-button")
    expect(alice.page.locator("[data-testid=confirmation-card]")).to_be_visible()

    card = bob.page.locator("[data-testid=request-row]")
    expect(card).to_have_count(1, timeout=POLL_WAIT_MS)
    expect(card.locator("[data-testid=summary]")).to_contain_text("Refund CNY 50.00 of order A202607290003")
    expect(card.locator("[data-testid=quorum]")).to_have_text("0 / 2")
    expect(bob.page.locator("[data-testid=nav-approvals-count]")).to_have_text("1")
    expect(bob.page.locator("[data-testid=tab-pending] .count")).to_have_text("1")
    expect(card.locator(".countdown")).to_contain_text(" left")
    assert _same_document(bob)
    bob.shot("2-new-request-appeared")

    assert not RequestClaim.objects.exists()  # a line drawn by the poll claims nothing

    # another approver approves: the quorum on bob's line moves
    carol = open_person("approver2")
    carol.sign_in(approver2.username, DEMO_PASSWORD)
    expect(carol.page).to_have_url(f"{carol.base_url}/approvals/")
    expect(carol.page.locator("[data-testid=nav-approvals-count]")).to_have_text("1")
    carol.shot("1-landed-with-count")
    carol.page.locator("[data-testid=request-card] [data-testid=approve]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("Approved (1/2)")
    expect(card.locator("[data-testid=quorum]")).to_have_text("1 / 2", timeout=POLL_WAIT_MS)
    assert _same_document(bob)
    bob.shot("3-quorum-moved")

    # a second request, rejected by carol: bob's card says so and can no longer be used
    runtime.chat_send(user=requester, message="Refund A202607290001 amount 20 because a part is missing")
    second = bob.page.locator("[data-testid=request-row]", has_text="CNY 20.00")
    expect(second).to_have_count(1, timeout=POLL_WAIT_MS)
    expect(bob.page.locator("[data-testid=nav-approvals-count]")).to_have_text("2")
    carol.goto("/approvals/")
    carol_second = carol.page.locator("[data-testid=request-card]", has_text="CNY 20.00")
    carol_second.locator("textarea[name=reason]").fill("the part was shipped separately")
    carol_second.locator("[data-testid=reject]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("Rejected")

    ended = second.locator("[data-testid=card-ended]")
    expect(ended).to_have_text("Rejected by acme-approver2; nothing will run. / 已被拒绝，不会执行。",
                               timeout=POLL_WAIT_MS)
    expect(second).to_have_class(re.compile(r"\bresolved\b"))
    expect(bob.page.locator("[data-testid=nav-approvals-count]")).to_have_text("1")
    assert _same_document(bob)
    bob.shot("4-rejected-elsewhere")
    assert bob.console_errors == [] and carol.console_errors == []


def _watching_a_refund(open_person, requester, approver1):
    """A refund the requester asked for, and approver1's open approvals page showing it in the pane
    (marked so a reload would be seen): (approver1's browser, the pane, the request id)."""
    outcome = runtime.chat_send(user=requester, message="Refund A202607290003 amount 50 because it arrived broken")
    request_id = outcome.pending[0].confirmation_id
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    card = bob.page.locator(f"[data-pane-for='{request_id}']")
    _expect()(card).to_be_visible()
    _no_reload(bob)
    return bob, card, request_id


def test_an_expiry_shows_on_the_open_page(open_person, requester, approver1):
    expect = _expect()
    bob, card, request_id = _watching_a_refund(open_person, requester, approver1)
    expect(bob.page.locator("[data-testid=nav-approvals-count]")).to_have_text("1")
    bob.shot("1-waiting")

    # the deadline passes on the server (the page's own countdown still shows minutes left)
    ConfirmationRequest.objects.filter(pk=request_id).update(expires_at=clock.now() - datetime.timedelta(seconds=1))

    ended = card.locator("[data-testid=card-ended]")
    expect(ended).to_have_attribute("data-outcome", "EXPIRED", timeout=POLL_WAIT_MS)
    expect(ended).to_contain_text("Expired before a decision")
    expect(card.locator("[data-testid=approve]")).to_be_disabled()
    expect(bob.page.locator("[data-testid=nav-approvals-count]")).to_be_hidden()
    assert _same_document(bob)
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.EXPIRED
    bob.shot("2-expired")
    assert bob.console_errors == []


def test_a_decision_on_a_stale_card_is_refused_readably(open_person, requester, approver1, approver2, settings):
    expect = _expect()
    settings.APPROVALS_POLL_SECONDS = 3600  # no poll: the card stays as drawn, stale
    outcome = runtime.chat_send(user=requester, message="Refund A202607290003 amount 50 because it arrived broken")
    request_id = outcome.pending[0].confirmation_id
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    card = bob.page.locator(f"[data-pane-for='{request_id}']")
    expect(card).to_be_visible()

    from approvals import approver_actions

    approver_actions.confirmation_reject(request_id=request_id, approver=approver2, reason="not covered")
    card.locator("[data-testid=approve]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("already decided")
    bob.shot("1-stale-refused")


def test_a_withdrawal_shows_on_the_open_page_in_both_languages(open_person, requester, approver1):
    # found by a probe: the banner fell back to the raw "WITHDRAWN by acme-requester"
    from approvals.requester_actions import confirmation_withdraw

    expect = _expect()
    bob, card, request_id = _watching_a_refund(open_person, requester, approver1)

    confirmation_withdraw(request_id=request_id, requester=requester, reason="the customer keeps it")

    ended = card.locator("[data-testid=card-ended]")
    expect(ended).to_have_attribute("data-outcome", "WITHDRAWN", timeout=POLL_WAIT_MS)
    expect(ended).to_contain_text("Withdrawn by the requester")
    expect(ended).to_contain_text("申请人已撤回")
    assert _same_document(bob) and bob.console_errors == []
