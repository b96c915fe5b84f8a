"""A policy bundle in Chromium: a tenant administrator uploads a bundle in the admin, sees the diff
against the version in force, applies it; then the requester's next large refund waits for two
approvers while a small one only needs the requester's confirmation (docs/policy.md, "Applying a
bundle").

The base gate: refund_order is CRITICAL (two approvers) in the registry, so the platform operator
first takes its global policy down to the requester's confirmation with a written waiver; the
bundle's rule then raises refunds over 500 to two approvers. Screenshots go to
test-artifacts/browser/.
"""
from __future__ import annotations

import textwrap

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD, order_id
from approvals.models import ConfirmationRequest
from policies.models import PolicyBundle
from tools.models import Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BUNDLE = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("refunds-over-500-need-two")
      @gate("approval") @quorum("2")
      permit (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("500.00")) };

      @id("no-refund-over-5000")
      @reason("Refunds over 5,000 are handled by finance, not the assistant")
      forbid (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("5000.00")) };
    ''')


def _refund(requester, suffix: str, amount: str):
    outcome = services.chat_send(user=requester,
                                 message=f"refund {order_id('acme', suffix)} amount {amount} because it arrived broken")
    [pending] = outcome.pending
    return pending, ConfirmationRequest.objects.get(pk=pending.confirmation_id)


def test_a_tenant_admin_applies_a_bundle_and_large_refunds_wait_for_two_approvers(
        open_person, acme_admin, requester, approver1, tmp_path):
    from playwright.sync_api import expect

    # the platform: refund_order needs only the requester's confirmation, with a written waiver (set
    # from the shell here; in the admin a loosening of a global policy is itself a control change).
    # Its risk is taken to HIGH too: a tenant's view of a tool still CRITICAL keeps two approvers
    # whatever the global waiver says (tools.policy.effective_policy).
    refund = Tool.objects.get(name="refund_order")
    refund.risk_override = "HIGH"
    refund.policy_override = "REQUESTER"
    refund.critical_floor_waiver = "Per-amount rules of each tenant's policy bundle gate refunds"
    refund.full_clean()
    refund.save()
    pending, request = _refund(requester, "0001", "20")
    assert (pending.needs, request.policy_rules) == ("requester", None)  # before any bundle: confirmation only

    # the tenant administrator uploads the bundle, validates it, sees the diff, applies it
    path = tmp_path / "acme-bundle.yaml"
    path.write_text(BUNDLE)
    admin = open_person("acme-admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    admin.goto("/admin/policies/policybundle/")
    admin.page.click(".object-tools a.addlink")
    admin.page.set_input_files("#id_upload", str(path))
    admin.page.click("[data-testid=bundle-check]")
    outcome = admin.page.locator("[data-testid=bundle-outcome]")
    expect(outcome).to_have_attribute("data-status", "checked")
    expect(outcome).to_contain_text("would become acme v1")
    diff = admin.page.locator("[data-testid=bundle-diff]")
    expect(diff).to_contain_text('+  @id("refunds-over-500-need-two")')
    expect(diff).to_contain_text("+++ v1")
    admin.shot("1-diff")
    assert not PolicyBundle.objects.exists()
    admin.page.fill("#id_comment", "refunds by amount")
    admin.page.click("[data-testid=bundle-apply]")
    expect(admin.page.locator(".messagelist .success")).to_contain_text("acme v1 is in force")
    expect(admin.page.locator("[data-testid=bundle-rules]")).to_contain_text("refunds-over-500-need-two")
    expect(admin.page.locator("[data-testid=bundle-rules]")).to_contain_text("handled by finance")
    admin.shot("2-applied")
    bundle = PolicyBundle.objects.get(tenant=acme_admin.tenant)
    assert (bundle.version, bundle.created_by_id, bundle.comment) == (1, acme_admin.pk, "refunds by amount")

    # the requester: a large refund waits for two approvers, a small one for their confirmation
    large, large_request = _refund(requester, "0003", "560")
    assert (large.needs, large.quorum) == ("approvers", 2)
    assert (large_request.policy, large_request.quorum) == ("APPROVERS", 2)
    assert (large_request.policy_version, large_request.policy_rules) == (1, ["refunds-over-500-need-two"])
    small, small_request = _refund(requester, "0006", "20")
    assert small.needs == "requester" and small_request.policy == "REQUESTER"
    assert small_request.policy_rules is None

    # an approver's dashboard shows the large refund waiting for two, and not the small one
    approver = open_person("acme-approver1")
    approver.sign_in(approver1.username, DEMO_PASSWORD, next_path="/approvals/")
    approver.goto("/approvals/")
    card = approver.page.locator(f"[data-request-id='{large.confirmation_id}']")
    expect(card).to_be_visible()
    expect(approver.page.locator(f"[data-request-id='{small.confirmation_id}']")).to_have_count(0)
    approver.shot("3-approver")
