"""Confirmations and approvals as people use them, in Chromium: confirm a cancellation in the chat, two approvers approve a
refund on the dashboard while the requester's chat waits, an admin takes a tool away from a tenant.

Screenshots of every page go to test-artifacts/browser/.
"""
from __future__ import annotations

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from agentplatform.runtime.models import Run, RunEvent
from tools.catalog.models import Cancellation, Order, Refund
from tools.models import TenantToolPolicy, Tool
from tests.browser.conftest import playwright_expect as _expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _order(tenant, order_id: str) -> Order:
    return Order.objects.get(tenant=tenant, order_id=order_id)


def _send(person, text: str) -> None:
    person.page.fill("#message-input", text)
    person.page.click("#send-button")


def test_requester_confirms_a_cancellation_and_sees_the_final_answer(open_person, requester):
    expect = _expect()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    expect(alice.page).to_have_url(f"{alice.base_url}/chat/")
    expect(alice.page.locator("#empty-state")).to_be_visible()
    alice.shot("1-chat-empty")

    # The page sends the non-blocking form: 202 at once, the run follows as events.
    with alice.page.expect_response(lambda r: r.url.endswith("/api/v1/chat/")) as chat_response:
        _send(alice, "Cancel A202607290001 because the customer changed their mind")
    assert chat_response.value.status == 202
    assert chat_response.value.request.headers.get("prefer") == "respond-async"

    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card).to_be_visible()
    expect(card.locator(".card-summary")).to_have_text("Cancel order A202607290001 / 取消订单 A202607290001")
    expect(card.locator("[data-testid=assistant-text]")).to_contain_text("the customer changed their mind")
    expect(card.locator(".badge-risk")).to_have_text("HIGH 高")
    expect(card.locator(".countdown")).to_contain_text(" left")
    expect(alice.page.locator(".step.waiting")).to_contain_text("Cancel an order / 取消订单")
    expect(alice.page.locator("#conversation-list .conversation")).to_have_count(1)
    alice.shot("2-confirmation-card")
    assert _order(requester.tenant, "A202607290001").status == Order.Status.PAID  # nothing ran yet

    card.locator("[data-testid=confirm]").click()

    final = alice.page.locator("[data-testid=final-answer]")
    expect(final).to_contain_text("Order A202607290001 has been cancelled")
    expect(card).to_contain_text("Done")
    expect(alice.page.locator(".step.ok")).to_contain_text("Cancel an order / 取消订单")
    alice.shot("3-final-answer")
    assert _order(requester.tenant, "A202607290001").status == Order.Status.CANCELLED
    assert Cancellation.objects.filter(order__order_id="A202607290001").count() == 1
    run = Run.objects.get(user=requester)
    assert run.status == Run.Status.COMPLETED

    # the page survives a reload: the conversation comes back from the API
    alice.page.reload()
    expect(alice.page.locator(".msg-assistant .answer")).to_contain_text("has been cancelled")
    assert alice.console_errors == []


def test_after_a_reload_the_requester_cancels_the_pending_call_with_a_fresh_token(open_person, requester):
    expect = _expect()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    _send(alice, "Cancel A202607290001 because the customer changed their mind")
    expect(alice.page.locator("[data-testid=confirmation-card]")).to_be_visible()

    # the token from the chat response is gone with the reload; the page asks for a fresh one
    alice.page.reload()
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card).to_contain_text("Cancel order A202607290001")
    alice.shot("1-card-after-reload")
    card.locator("[data-testid=cancel]").click()

    final = alice.page.locator("[data-testid=final-answer]")
    expect(final).to_contain_text("You rejected")
    expect(card).to_contain_text("Cancelled — nothing was done")
    alice.shot("2-cancelled")
    assert _order(requester.tenant, "A202607290001").status == Order.Status.PAID
    assert not Cancellation.objects.exists()
    assert Run.objects.get(user=requester).status == Run.Status.COMPLETED
    assert alice.console_errors == []


def test_two_approvers_approve_a_refund_and_the_requester_sees_the_result(open_person, requester, approver1,
                                                                          approver2):
    expect = _expect()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    _send(alice, "Refund A202607290003 amount 50 because the item arrived damaged")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card).to_contain_text("Refund CNY 50.00 of order A202607290003")
    expect(card.locator(".badge-risk")).to_have_text("CRITICAL 极高")
    expect(card.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")
    expect(card.locator("[data-testid=confirm]")).to_have_count(0)  # approvers decide, not the requester
    alice.shot("1-waiting-for-approvers")

    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    request_card = bob.page.locator("[data-testid=request-card]")
    expect(request_card).to_have_count(1)
    expect(request_card.locator("[data-testid=summary]")).to_contain_text("Refund CNY 50.00 of order A202607290003")
    expect(request_card.locator("[data-testid=requester]")).to_have_text(requester.username)
    expect(request_card.locator("[data-testid=quorum]")).to_have_text("0 / 2")
    expect(request_card.locator("[data-testid=excerpt]")).to_contain_text("arrived damaged")
    expect(request_card.locator(".countdown")).to_contain_text(" left")
    bob.shot("2-dashboard-pending")
    request_card.locator("textarea[name=comment]").fill("Photo of the damage checked")
    request_card.locator("[data-testid=approve]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_contain_text("Approved (1/2)")
    expect(bob.page.locator("[data-testid=request-card]")).to_have_count(0)
    bob.shot("3-dashboard-after-approval")

    # refreshed on the requester's page by a poll every 4 s: allow more than one poll on a loaded machine
    expect(card.locator("[data-testid=approvals-count]")).to_have_text("1 / 2", timeout=15_000)
    assert Refund.objects.count() == 0

    carol = open_person("approver2")
    carol.sign_in(approver2.username, DEMO_PASSWORD, next_path="/approvals/")
    carol_card = carol.page.locator("[data-testid=request-card]")
    expect(carol_card.locator("[data-testid=quorum]")).to_have_text("1 / 2")
    carol_card.locator("[data-testid=approve]").click()
    expect(carol.page.locator("[data-testid=flash]")).to_contain_text("quorum reached")

    final = alice.page.locator("[data-testid=final-answer]")
    expect(final).to_contain_text("Refunded 50", timeout=15_000)
    expect(final).to_contain_text("A202607290003")
    expect(card).to_contain_text("Done")
    alice.shot("4-refund-answer")
    assert Refund.objects.filter(order__order_id="A202607290003").count() == 1

    carol.page.click("[data-testid=tab-history]")
    carol.page.locator("[data-testid=row-open]").first.click()  # the decided tab opens nothing by itself
    expect(carol.page.locator("[data-testid=status]").first).to_have_text("EXECUTED")
    expect(carol.page.locator(".decisions")).to_contain_text("Photo of the damage checked")
    carol.shot("5-dashboard-history")
    assert alice.console_errors == [] and bob.console_errors == [] and carol.console_errors == []


def test_admin_disables_cancel_order_for_a_tenant_and_the_next_chat_no_longer_offers_it(open_person, requester,
                                                                                        operator):
    expect = _expect()
    tenant = requester.tenant
    cancel = Tool.objects.get(name="cancel_order")
    dave = open_person("admin")
    dave.sign_in(operator.username, DEMO_PASSWORD, next_path=f"/admin/tools/tool/{cancel.pk}/change/")
    expect(dave.page.locator(".readonly").first).to_be_visible()
    dave.shot("0-tool")
    dave.page.click("text=Object permissions")
    expect(dave.page.locator("body")).to_contain_text("acme-approvers")  # group holding approve_tool
    dave.shot("0-tool-object-permissions")

    dave.goto(f"/admin/tenancy/tenant/{tenant.pk}/change/")
    expect(dave.page.locator("#tool_policies-group")).to_be_visible()
    rows = TenantToolPolicy.objects.filter(tenant=tenant).count()
    index = next(i for i in range(rows)
                 if dave.page.input_value(f"#id_tool_policies-{i}-tool") == str(cancel.pk))
    checkbox = dave.page.locator(f"#id_tool_policies-{index}-enabled")
    expect(checkbox).to_be_checked()
    checkbox.uncheck()
    dave.shot("1-tenant-whitelist")
    dave.page.click("input[name=_save]")
    expect(dave.page.locator(".messagelist .success")).to_be_visible()
    dave.shot("2-saved")
    assert TenantToolPolicy.objects.get(tenant=tenant, tool=cancel).enabled is False

    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    offered = alice.page.request.get(f"{alice.base_url}/api/v1/tools/").json()
    names = {t["name"] for t in (offered["results"] if isinstance(offered, dict) else offered)}
    assert "cancel_order" not in names and "refund_order" in names

    _send(alice, "Cancel A202607290003 because the customer changed their mind")

    # the person reads that the action is not offered to them; the code stays in the API
    final = alice.page.locator("[data-testid=final-answer]")
    expect(final).to_contain_text("it is not among the actions offered to you")
    expect(alice.page.locator(".step.failed")).to_contain_text("not available to you")
    expect(alice.page.locator(".step.failed")).to_have_attribute("data-code", "TOOL_NOT_FOUND")
    expect(alice.page.locator("#messages")).not_to_contain_text("TOOL_NOT_FOUND")
    expect(alice.page.locator("[data-testid=confirmation-card]")).to_have_count(0)
    alice.shot("3-chat-tool-not-offered")
    run = Run.objects.get(user=requester)
    completed = run.events.get(type=RunEvent.Type.TOOL_EXECUTION_COMPLETED)
    assert (completed.payload["tool"], completed.payload["code"]) == ("cancel_order", "TOOL_NOT_FOUND")
    assert _order(tenant, "A202607290003").status == Order.Status.PAID
    assert alice.console_errors == []


def test_the_requester_sees_who_rejected_and_why_and_can_stop_a_waiting_run(open_person, requester, approver1):
    # the rejection's reason and the approver's name reach the requester's
    # card; a run that still waits can be stopped from the chat page
    expect = _expect()
    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD)
    _send(alice, "Refund A202607290003 amount 50 because the item arrived damaged")
    card = alice.page.locator("[data-testid=confirmation-card]")
    expect(card.locator("[data-testid=approvals-count]")).to_have_text("0 / 2")

    bob = open_person("approver1")
    bob.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    request_card = bob.page.locator("[data-testid=request-card]")
    request_card.locator("textarea[name=reason]").fill("fraud suspected")
    request_card.locator("[data-testid=reject]").click()
    expect(bob.page.locator("[data-testid=flash]")).to_be_visible()

    # the requester's page learns it from the run's event stream: allow for a loaded machine
    expect(card).to_contain_text(f"Rejected by {approver1.username}", timeout=20_000)
    expect(card).to_contain_text("fraud suspected")
    alice.shot("1-rejected-with-reason")
    assert Refund.objects.count() == 0

    _send(alice, "Cancel A202607290001 because the customer changed their mind")
    cancel_card = alice.page.locator("[data-testid=confirmation-card]").last
    expect(cancel_card).to_contain_text("Cancel order A202607290001", timeout=20_000)
    stop = alice.page.locator("[data-testid=stop-run]:visible")
    expect(stop).to_have_count(1)
    stop.click()

    expect(cancel_card).to_contain_text("Run stopped", timeout=20_000)
    alice.shot("2-run-stopped")
    assert _order(requester.tenant, "A202607290001").status == Order.Status.PAID
    assert Run.objects.filter(user=requester, status=Run.Status.CANCELLED).count() == 1
    assert alice.console_errors == [] and bob.console_errors == []
