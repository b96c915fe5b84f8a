"""The approver's inbox in Chromium: a compact list with filters and search, the keys j/k/o/a/r,
a claim seen by a second approver in another browser (who can still decide), a phone with Approve
in its first screen and no sideways scrolling, and axe with nothing serious.

Screenshots go to test-artifacts/browser/.
"""
from __future__ import annotations

import re
import uuid

import pytest

from agentplatform.runtime import services as runtime
from agentplatform.runtime.demo.seed import DEMO_PASSWORD, order_id
from approvals.models import Approval, ConfirmationRequest, RequestClaim, RequestView
from tests.browser.conftest import PHONE, playwright_expect as _expect
from tests.browser.test_newcomers import _axe

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _refund(requester, suffix: str, amount: int) -> str:
    """A refund the requester asked for through the chat, waiting for approvers: its id."""
    outcome = runtime.chat_send(user=requester, message=f"Refund {order_id('acme', suffix)} amount {amount} "
                                                        f"because the item arrived damaged")
    [pending] = outcome.pending
    assert pending.needs == "approvers"
    return pending.confirmation_id


def _rows(person):
    return person.page.locator("[data-testid=request-row]")


def test_an_approver_filters_searches_and_clears_the_queue_by_keys(open_person, requester, approver1):
    expect = _expect()
    small = _refund(requester, "0001", 20)
    big = _refund(requester, "0003", 50)
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    expect(bob.page).to_have_url(f"{bob.base_url}/approvals/")
    expect(_rows(bob)).to_have_count(2)
    first = _rows(bob).first
    expect(first).to_have_attribute("data-request-id", big)  # newest first
    expect(first.locator("[data-testid=amount]")).to_have_text("CNY 50.00")
    expect(first.locator("[data-testid=requester]")).to_have_text(requester.username)
    expect(first.locator("[data-testid=quorum]")).to_have_text("0 / 2")
    expect(first).to_contain_text("Refund an order")  # the tool's title, not its wire name
    expect(first.locator(".countdown")).to_contain_text(" left")
    expect(first.locator("[data-testid=row-page]")).to_have_attribute("href", f"/approvals/{big}/")
    # the pane opened the first request: its facts, and a record that bob saw them
    pane = bob.page.locator("[data-testid=request-card]")
    expect(pane).to_have_attribute("data-pane-for", big)
    expect(pane.locator("[data-fact=refund_amount] td")).to_contain_text("CNY 50.00")
    assert RequestView.objects.filter(request_id=big, user=approver1).count() == 1
    expect(bob.page.locator("[data-testid=shortcut-help]")).to_contain_text("approve")
    bob.shot("1-inbox")

    # filters: the amount range keeps the big one; the search finds the small one by its order
    bob.page.locator(".inbox-filters summary").click()
    bob.page.fill("[data-testid=filter-amount-min]", "30")
    bob.page.click("[data-testid=apply-filters]")
    expect(_rows(bob)).to_have_count(1)
    expect(_rows(bob).first).to_have_attribute("data-request-id", big)
    bob.goto("/approvals/?q=" + order_id("acme", "0001"))
    expect(_rows(bob)).to_have_count(1)
    expect(_rows(bob).first).to_have_attribute("data-request-id", small)
    bob.page.select_option("[data-testid=filter-tool]", "refund_order")
    bob.page.select_option("[data-testid=filter-risk]", "LOW")
    bob.page.click("[data-testid=apply-filters]")
    expect(_rows(bob)).to_have_count(0)
    expect(bob.page.locator(".empty")).to_contain_text("Nothing matches")
    bob.shot("2-filtered")

    # keys: typing "a" in the search box approves nothing
    bob.goto("/approvals/")
    bob.page.keyboard.press("/")
    expect(bob.page.locator("[data-testid=search]")).to_be_focused()
    bob.page.keyboard.type("a r j")
    assert not Approval.objects.exists()
    bob.page.locator("[data-testid=search]").blur()
    # j moves down to the small one, k back up, j again, o opens it in the pane
    bob.page.keyboard.press("j")
    expect(_rows(bob).nth(1)).to_have_class(re.compile(r"\bis-current\b"))
    bob.page.keyboard.press("k")
    expect(_rows(bob).nth(0)).to_have_class(re.compile(r"\bis-current\b"))
    bob.page.keyboard.press("j")
    bob.page.keyboard.press("o")
    expect(pane).to_have_attribute("data-pane-for", small)
    # a approves what the pane shows
    bob.page.keyboard.press("a")
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Approved (1/2)")
    assert Approval.objects.get(approver=approver1).request_id == uuid_of(small)
    # the next request opens by itself; r asks for a reason, which is required
    expect(pane).to_have_attribute("data-pane-for", big)
    bob.page.keyboard.press("r")
    reason = pane.locator("textarea[name=reason]")
    expect(reason).to_be_focused()
    bob.page.keyboard.press("Control+Enter")  # empty: nothing is sent
    assert Approval.objects.count() == 1
    reason.fill("the customer already received a voucher")
    bob.page.keyboard.press("Control+Enter")
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Rejected")
    assert ConfirmationRequest.objects.get(pk=big).decision_reason.startswith("the customer already")
    expect(_rows(bob)).to_have_count(0)
    bob.goto("/approvals/history/")
    expect(_rows(bob)).to_have_count(2)
    expect(bob.page.locator("main")).to_contain_text("the customer already received a voucher")
    bob.shot("3-cleared")
    assert bob.console_errors == []


def uuid_of(value: str) -> uuid.UUID:
    return uuid.UUID(str(value))


def test_a_claim_shows_to_a_second_approver_who_can_still_decide(open_person, requester, approver1, approver2):
    expect = _expect()
    request_id = _refund(requester, "0003", 50)
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    pane = bob.page.locator("[data-testid=request-card]")
    expect(pane.locator("[data-testid=claim]")).to_contain_text("You are reviewing this")
    claim = RequestClaim.objects.get(request_id=request_id)
    assert claim.user_id == approver1.pk

    carol = open_person("approver2")
    carol.sign_in(approver2.username, DEMO_PASSWORD)
    carol_pane = carol.page.locator("[data-testid=request-card]")
    expect(carol_pane).to_have_attribute("data-pane-for", request_id)
    expect(carol_pane.locator("[data-testid=claim]")).to_have_text(
        f"Being reviewed by {approver1.username} {approver1.username} 正在审阅; you may still decide.")
    expect(_rows(carol).first.locator("[data-testid=row-claim]")).to_contain_text(
        f"Being reviewed by {approver1.username}")
    assert RequestClaim.objects.get(request_id=request_id).user_id == approver1.pk  # carol's opening took nothing
    carol.shot("1-sees-the-claim")

    # bob lets it go and takes it back with the buttons
    pane.locator("[data-testid=release]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Released")
    assert not RequestClaim.objects.exists()
    expect(pane.locator("[data-testid=claim]")).to_have_count(0)
    pane.locator("[data-testid=claim-button]").click()
    expect(pane.locator("[data-testid=claim]")).to_contain_text("You are reviewing this")
    assert RequestClaim.objects.get(request_id=request_id).user_id == approver1.pk

    # the claim never blocks: carol approves; bob, still reviewing, keeps his claim
    carol_pane.locator("[data-testid=approve]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("Approved (1/2)")
    assert RequestClaim.objects.get(request_id=request_id).user_id == approver1.pk
    expect(pane.locator("[data-testid=quorum]")).to_have_text("1 / 2", timeout=15_000)
    # bob approves: quorum, and the claim is gone
    pane.locator("[data-testid=approve]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("quorum reached")
    assert not RequestClaim.objects.filter(request_id=request_id).exists()
    bob.shot("2-decided")
    assert bob.console_errors == [] and carol.console_errors == []


def _no_horizontal_scroll(person) -> None:
    width = person.page.evaluate("document.documentElement.scrollWidth")
    assert width <= person.page.viewport_size["width"], f"page is {width}px wide"


def test_on_a_phone_approve_is_in_the_first_screen(open_person, requester, approver1):
    expect = _expect()
    for suffix, amount in (("0001", 20), ("0003", 50), ("0005", 30)):
        _refund(requester, suffix, amount)
    bob = open_person("phone-approver", **PHONE)
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    for path in ("/approvals/", f"/approvals/{ConfirmationRequest.objects.order_by('created_at').first().pk}/"):
        bob.goto(path)
        approve = bob.page.locator("[data-testid=approve]")
        expect(approve).to_be_visible()
        box = approve.bounding_box()
        assert box["y"] + box["height"] <= 844, f"{path}: Approve ends at {box['y'] + box['height']}px"
        _no_horizontal_scroll(bob)
        bob.shot("approve-in-view-" + ("list" if path == "/approvals/" else "detail"))
    bob.goto("/approvals/history/")
    _no_horizontal_scroll(bob)


def test_the_facts_table_reads_well_on_a_wide_screen(open_person, requester, approver1):
    expect = _expect()
    _refund(requester, "0003", 50)
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    value = bob.page.locator("[data-testid=request-card] [data-fact=order_id] td")
    expect(value).to_have_text(order_id("acme", "0003"))
    box = value.bounding_box()
    assert box["width"] >= 150, f"the facts' values are squeezed to {box['width']}px"
    # one line: the order id does not break mid-word
    line = bob.page.evaluate("parseFloat(getComputedStyle(document.querySelector("
                             "'[data-testid=request-card] [data-fact=order_id] td')).lineHeight)")
    assert box["height"] < 2 * line + 8


def test_no_serious_accessibility_violations_on_the_inbox(open_person, requester, approver1):
    request_id = _refund(requester, "0003", 50)
    _refund(requester, "0001", 20)
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD)
    problems = _axe(bob, "inbox")
    bob.page.locator(".inbox-filters summary").click()
    problems += _axe(bob, "inbox-filters-open")
    bob.goto(f"/approvals/{request_id}/")
    problems += _axe(bob, "request-page")
    bob.goto("/approvals/history/")
    problems += _axe(bob, "decided")
    assert problems == []
