"""Dual control in Chromium: a tenant administrator proposes an approver grant in the admin, a
second administrator approves it there, and only then does the new approver see a request on
/approvals/ (and only one created after their standing began). docs/roles.md, "Trust model".

Screenshots go to test-artifacts/browser/.
"""
from __future__ import annotations

import pytest

from agentplatform.controlplane.models import PendingControlChange
from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD, order_id
from agentplatform.tenancy.models import User
from tools.models import Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _refund(requester, suffix: str) -> str:
    outcome = services.chat_send(user=requester,
                                 message=f"refund {order_id('acme', suffix)} amount 10 because it arrived broken")
    [pending] = outcome.pending
    assert pending.needs == "approvers"
    return pending.confirmation_id


def test_an_approver_grant_takes_effect_only_when_a_second_administrator_approves_it(
        open_person, acme_admin, acme_admin2, nobody, requester):
    from playwright.sync_api import expect

    refund = Tool.objects.get(name="refund_order")

    # a tenant administrator grants approve_tool on refund_order to acme-nobody: proposed only
    admin = open_person("acme-admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    admin.goto(f"/admin/tools/tool/{refund.pk}/permissions/user-manage/{nobody.pk}/")
    admin.page.select_option("#id_permissions_from", "approve_tool")
    admin.page.click("#id_permissions_add")
    admin.page.click("input#submit")
    expect(admin.page).to_have_url(f"{admin.base_url}/admin/controlplane/pendingcontrolchange/")
    expect(admin.page.locator(".messagelist .warning").first).to_contain_text("needs a second administrator")
    expect(admin.page.locator("#result_list")).to_contain_text("grant approve_tool on refund_order to acme-nobody")
    admin.shot("1-proposed")
    change = PendingControlChange.objects.get(status="PENDING")
    assert not User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", refund)

    # the proposer cannot approve it themselves
    admin.page.check(f"input[name=_selected_action][value='{change.pk}']")
    admin.page.select_option("select[name=action]", "approve_changes")
    admin.page.click("button[name=index]")
    expect(admin.page.locator(".messagelist .error")).to_contain_text("never approves their own change")
    admin.shot("2-own-change-refused")

    # a request made now is not on the new approver's dashboard: no standing yet
    before = _refund(requester, "0001")
    approver = open_person("acme-nobody")
    approver.sign_in(nobody.username, DEMO_PASSWORD, next_path="/approvals/")
    approver.goto("/approvals/")
    expect(approver.page.locator("main")).not_to_contain_text(before)
    assert before not in approver.page.content()
    approver.shot("3-nothing-to-decide")

    # a second administrator approves the change in the admin
    second = open_person("acme-admin2")
    second.sign_in(acme_admin2.username, DEMO_PASSWORD, next_path="/admin/")
    second.goto("/admin/controlplane/pendingcontrolchange/")
    second.page.check(f"input[name=_selected_action][value='{change.pk}']")
    second.page.select_option("select[name=action]", "approve_changes")
    second.page.click("button[name=index]")
    expect(second.page.locator(".messagelist .success")).to_contain_text("Approved and applied")
    expect(second.page.locator("#result_list")).to_contain_text("Applied")
    second.shot("4-approved")
    assert User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", refund)

    # only now, and only for a request created after that, does the new approver see it
    after = _refund(requester, "0006")
    approver.goto("/approvals/")
    card = approver.page.locator(f"[data-pane-for='{after}']")
    expect(card).to_be_visible()
    expect(card.locator("[data-testid=eligible-approvers]")).to_contain_text("acme-nobody")
    assert before not in approver.page.content()  # standing began after it: not theirs to decide
    approver.shot("5-sees-the-new-request")
