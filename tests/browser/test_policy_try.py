"""Try a call in Chromium: a tenant administrator finds "Try a call" on the admin index, tries a
large and a forbidden refund for a requester of their tenant, and reads the verdict, the quorum and
the rule that decided, with what a shadow rule would do; an invalid try answers with a form error.
Nothing is recorded. Screenshots go to test-artifacts/browser/."""
from __future__ import annotations

import json
import textwrap

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from policies.models import ShadowVerdict
from tests.policies.support import EXAMPLE, apply
from tests.tools.support import REFUND_ORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BUNDLE = EXAMPLE + textwrap.indent(textwrap.dedent('''
    @id("shadow-refunds-over-100")
    @mode("shadow")
    forbid (principal, action == Action::"refund_order", resource)
    when { context.arguments.amount.greaterThan(decimal("100.00")) };
    '''), "  ")


def test_a_tenant_administrator_tries_a_call_and_sees_the_rule_that_decided(open_person, acme_admin, requester,
                                                                            outsider):
    from playwright.sync_api import expect

    from policies import selectors

    selectors._CACHE.clear()
    applied = apply(requester.tenant_id, BUNDLE)
    recorded = (ConfirmationRequest.objects.count(), AuditEvent.objects.count(), ShadowVerdict.objects.count())
    admin = open_person("acme-admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    admin.page.get_by_role("link", name="Try a call").first.click()
    expect(admin.page.locator("[data-testid=policy-try-form]")).to_be_visible()
    # another tenant's members are not offered
    expect(admin.page.locator(f"[data-testid=policy-try-requester] option[value='{outsider.username}']")).to_have_count(0)

    admin.page.select_option("[data-testid=policy-try-tool]", "refund_order")
    admin.page.select_option("[data-testid=policy-try-requester]", requester.username)
    admin.page.fill("[data-testid=policy-try-arguments]",
                    json.dumps({"order_id": REFUND_ORDER, "amount": "550.00", "reason": "damaged"}))
    admin.page.click("[data-testid=policy-try-submit]")
    result = admin.page.locator("[data-testid=policy-try-result]")
    expect(result).to_have_attribute("data-verdict", "APPROVERS")
    expect(admin.page.locator("[data-testid=policy-try-verdict]")).to_contain_text("needs 3 approvers")
    expect(admin.page.locator("[data-testid=policy-try-quorum]")).to_have_text("3")
    expect(admin.page.locator("[data-testid=policy-try-version]")).to_have_text(f"v{applied.version}")
    expect(admin.page.locator("[data-testid=policy-try-rules]")).to_contain_text("refunds-over-500-need-three")
    expect(admin.page.locator("[data-testid=policy-try-shadow]")).to_contain_text("shadow-refunds-over-100")
    admin.shot("1-needs-three")

    admin.page.fill("[data-testid=policy-try-arguments]",
                    json.dumps({"order_id": REFUND_ORDER, "amount": "6000.00", "reason": "damaged"}))
    admin.page.click("[data-testid=policy-try-submit]")
    expect(result).to_have_attribute("data-verdict", "DENIED")
    expect(admin.page.locator("[data-testid=policy-try-code]")).to_have_text("POLICY_DENIED")
    expect(admin.page.locator("[data-testid=policy-try-reason]")).to_contain_text("handled by finance")
    expect(admin.page.locator("[data-testid=policy-try-rules]")).to_contain_text("no-refund-over-5000")
    admin.shot("2-denied")

    admin.page.fill("[data-testid=policy-try-arguments]", '{"order_id": ')
    admin.page.click("[data-testid=policy-try-submit]")
    expect(admin.page.locator(".errorlist")).to_contain_text("not valid JSON")
    expect(admin.page.locator("[data-testid=policy-try-result]")).to_have_count(0)
    admin.shot("3-bad-json")

    assert (ConfirmationRequest.objects.count(), AuditEvent.objects.count(),
            ShadowVerdict.objects.count()) == recorded


def test_the_shadow_report_counts_what_a_shadow_rule_would_have_done_and_leads_to_the_call(open_person, acme_admin,
                                                                                          requester):
    from playwright.sync_api import expect

    from policies import selectors
    from tests.policies.support import call

    selectors._CACHE.clear()
    apply(requester.tenant_id, BUNDLE)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "300.00", "reason": "damaged"},
                   call_id="call_shadowed")
    assert outcome.pending is not None  # the shadow forbid did not stop it
    admin = open_person("acme-admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    admin.page.get_by_role("link", name="Shadow report").first.click()
    row = admin.page.locator("[data-testid=shadow-report] tr[data-rule=shadow-refunds-over-100]")
    expect(row).to_contain_text("would have denied 1 call")
    admin.shot("1-shadow-report")
    row.locator("a[data-would=DENY]").click()
    expect(admin.page.locator("[data-testid=shadow-calls] tbody tr")).to_have_count(1)
    admin.page.locator("[data-testid=shadow-call-audit]").click()
    expect(admin.page.locator("#result_list tbody tr")).to_have_count(1)
    expect(admin.page.locator("#result_list")).to_contain_text("refund_order")
    admin.shot("2-audit-row")
