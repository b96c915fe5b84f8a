"""Edit, respond and withdraw in Chromium: an approver edits a refund's amount and another approves
the edited call, which runs once with the edited arguments; an approver responds with guidance
and the assistant relays it; the requester sees their requests (who decided, comments, edits,
expiry) and withdraws a pending one.

Screenshots (test-artifacts/browser/): approval-edit.png, approval-edited-card.png,
approval-respond.png, my-requests.png, my-requests-withdrawn.png.
"""
from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from agentplatform.runtime.models import Message, Run
from approvals.models import ConfirmationRequest
from tests.browser.conftest import playwright_expect as _expect, named_shot as _named_shot
from tools.catalog.models import Refund

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUND_ORDER = "A202607290003"  # acme, PAID, CNY 560.00


def _card(person, request_id):
    """The request on My requests."""
    return person.page.locator(f"[data-request-id='{request_id}']")


def _pane(person, request_id):
    """The request open in the approver's inbox pane."""
    return person.page.locator(f"[data-pane-for='{request_id}']")


def _refund_requested(requester) -> tuple[str, str]:
    outcome = services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it arrived damaged")
    return outcome.pending[0].confirmation_id, str(outcome.run.pk)


def _tool_results(run_id) -> list[dict]:
    return [json.loads(m.content) for m in Message.objects.filter(run_id=run_id, role="tool").order_by("pk")]


def test_an_approver_edits_another_approves_and_the_edited_call_runs_once(open_person, requester, approver1,
                                                                          approver2):
    expect = _expect()
    request_id, run_id = _refund_requested(requester)

    # approver1 edits the amount of the full refund to 50
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    card = _pane(bob, request_id)
    card.locator("[data-testid=edit] summary").click()
    card.locator("[data-testid=edit-amount]").fill("50")
    card.locator("input[name=comment]").fill("only the damaged part")
    card.scroll_into_view_if_needed()
    _named_shot(bob, "approval-edit.png")
    card.locator("[data-testid=edit-submit]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Another approver must approve")
    stored = ConfirmationRequest.objects.get(pk=request_id)
    assert (stored.revision, stored.arguments["amount"], stored.status) == (1, "50.00", "PENDING")
    assert Refund.objects.count() == 0

    # approver2 sees the edited arguments, who changed what, and approves them
    carol = open_person("approver2")
    carol.sign_in(approver2.username, DEMO_PASSWORD, next_path="/approvals/")
    carol_card = _pane(carol, request_id)
    expect(carol_card.locator("[data-testid=summary]")).to_contain_text(f"Refund CNY 50.00 of order {REFUND_ORDER}")
    expect(carol_card.locator("[data-testid=arguments]")).to_contain_text("50.00")
    expect(carol_card.locator("[data-testid=change]")).to_contain_text("amount: — → 50.00")
    expect(carol_card.locator("[data-testid=quorum]")).to_have_text("1 / 2")
    carol_card.scroll_into_view_if_needed()
    _named_shot(carol, "approval-edited-card.png")
    carol_card.locator("[data-testid=approve]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("quorum reached")

    # the edited call ran exactly once, and the requester and the model were told
    [refund] = Refund.objects.all()
    assert refund.amount == Decimal("50.00")
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.COMPLETED
    [result] = _tool_results(run_id)
    assert result["success"] and approver1.username in result["message"]
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path="/approvals/mine/")
    mine = _card(alice, request_id)
    expect(mine.locator("[data-testid=status]")).to_have_text("EXECUTED")
    expect(mine.locator("[data-testid=decisions]")).to_contain_text(approver1.username)
    expect(mine.locator("[data-testid=decisions]")).to_contain_text("amount: — → 50.00")
    expect(mine.locator("[data-testid=decisions]")).to_contain_text("only the damaged part")
    assert bob.console_errors == [] and carol.console_errors == [] and alice.console_errors == []


def test_an_approver_responds_with_guidance_and_the_run_continues(open_person, requester, approver1):
    expect = _expect()
    request_id, run_id = _refund_requested(requester)
    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    card = _pane(bob, request_id)
    card.locator("[data-testid=respond] summary").click()
    card.locator("textarea[name=guidance]").fill("Ask the customer for photos first")
    card.scroll_into_view_if_needed()
    _named_shot(bob, "approval-respond.png")
    card.locator("[data-testid=respond-submit]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Guidance sent")

    # the model got a tool message that is neither a success nor a rejection, and answered
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.COMPLETED
    [result] = _tool_results(run_id)
    assert (result["success"], result["code"]) == (False, "APPROVER_GUIDANCE")
    assert "Ask the customer for photos first" in run.final_answer
    assert Refund.objects.count() == 0
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path="/approvals/mine/")
    mine = _card(alice, request_id)
    expect(mine.locator("[data-testid=status]")).to_have_text("RESPONDED")
    expect(mine.locator("[data-testid=decided-by]")).to_contain_text("Ask the customer for photos first")
    assert bob.console_errors == [] and alice.console_errors == []


def test_the_requester_sees_and_withdraws_a_pending_request(open_person, requester, approver1):
    expect = _expect()
    request_id, run_id = _refund_requested(requester)
    services_client = open_person("approver1")
    services_client.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    card = _pane(services_client, request_id)
    card.locator("textarea[name=comment]").fill("looks fine to me")
    card.locator("[data-testid=approve]").click()
    expect(services_client.page.locator("[data-testid=flash]")).to_contain_text("Approved (1/2)")

    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    alice.page.click("[data-testid=nav-my-requests]")
    mine = _card(alice, request_id)
    expect(mine.locator("[data-testid=status]")).to_have_text("PENDING")
    expect(mine.locator("[data-testid=quorum]")).to_have_text("1 / 2")
    expect(mine.locator("[data-testid=quorum-unreachable]")).to_have_count(0)  # approver2 may still decide
    expect(mine.locator("[data-testid=decisions]")).to_contain_text(approver1.username)
    expect(mine.locator("[data-testid=decisions]")).to_contain_text("looks fine to me")
    expect(mine.locator("[data-testid=expires]")).to_contain_text("UTC")
    _named_shot(alice, "my-requests.png")
    mine.locator("input[name=reason]").fill("the customer keeps the item")
    mine.locator("[data-testid=withdraw]").click()
    expect(alice.page.locator("[data-testid=flash]")).to_contain_text("Withdrawn")
    expect(_card(alice, request_id).locator("[data-testid=status]")).to_have_text("WITHDRAWN")
    expect(_card(alice, request_id).locator("[data-testid=withdraw]")).to_have_count(0)
    _named_shot(alice, "my-requests-withdrawn.png")

    # the run was told; approvers can no longer decide it
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.COMPLETED
    [result] = _tool_results(run_id)
    assert (result["success"], result["code"]) == (False, "WITHDRAWN")
    assert ConfirmationRequest.objects.get(pk=request_id).status == "WITHDRAWN"
    services_client.page.reload()
    expect(_card(services_client, request_id)).to_have_count(0)
    assert Refund.objects.count() == 0
    assert alice.console_errors == []


def test_the_requester_sees_when_a_quorum_can_no_longer_be_reached(open_person, requester, approver1, approver2):
    # found by a probe: "PENDING 1 / 2" until expiry, although nobody else could decide
    from approvals import approver_actions

    expect = _expect()
    request_id, _ = _refund_requested(requester)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    approver2.is_active = False
    approver2.save(update_fields=["is_active"])

    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path="/approvals/mine/")
    warning = _card(alice, request_id).locator("[data-testid=quorum-unreachable]")
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("cannot be reached")
    expect(warning).to_contain_text("无法达到")
    _named_shot(alice, "my-requests-quorum-unreachable.png")

