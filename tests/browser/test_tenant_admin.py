"""Tenant administration in Chromium: a tenant administrator manages their tenant's whitelist, tightens a tool
and grants use_tool in /admin/, and sees nothing of the other tenant.

Screenshots go to test-artifacts/browser/.
"""
from __future__ import annotations

import re

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from agentplatform.tenancy.models import User
from audit.models import AuditEvent
from tools.models import TenantToolPolicy, Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_tenant_admin_manages_whitelist_and_grants_and_sees_nothing_of_the_other_tenant(open_person, acme_admin,
                                                                                        nobody, outsider):
    from playwright.sync_api import expect

    tenant = acme_admin.tenant
    cancel = Tool.objects.get(name="cancel_order")
    inventory = Tool.objects.get(name="query_inventory")
    admin = open_person("acme-admin")
    failed = []
    admin.page.on("response", lambda r: r.status >= 400 and failed.append((r.status, r.url)))
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    body = admin.page.locator("body")
    expect(body).to_contain_text("Tenant tool policies")
    expect(body).not_to_contain_text("globex")
    admin.shot("0-index")

    # the whitelist: only acme's rows, no tenant filter listing every tenant
    admin.goto("/admin/tools/tenanttoolpolicy/")
    expect(admin.page.locator("#result_list tbody tr")).to_have_count(
        TenantToolPolicy.objects.filter(tenant=tenant).count())
    expect(body).not_to_contain_text("globex")
    admin.shot("1-whitelist")

    # tighten cancel_order in this tenant: quorum 3, CRITICAL, TTL 120 s; then try to loosen
    entry = TenantToolPolicy.objects.get(tenant=tenant, tool=cancel)
    admin.goto(f"/admin/tools/tenanttoolpolicy/{entry.pk}/change/")
    admin.page.select_option("#id_risk_override", "CRITICAL")
    admin.page.fill("#id_quorum", "3")
    admin.page.fill("#id_ttl_seconds", "120")
    admin.page.click("input[name=_continue]")
    expect(admin.page.locator(".messagelist .success")).to_be_visible()
    expect(body).to_contain_text("risk CRITICAL, policy APPROVERS, quorum 3, TTL 120 s")
    admin.shot("2-tightened")
    admin.page.select_option("#id_risk_override", "LOW")
    admin.page.fill("#id_ttl_seconds", "86400")
    admin.page.click("input[name=_continue]")
    expect(admin.page.locator(".errornote")).to_be_visible()
    expect(body).to_contain_text("a tenant may only raise the risk")
    admin.shot("3-loosening-refused")
    entry.refresh_from_db()
    assert (entry.risk_override, entry.quorum, entry.ttl_seconds) == ("CRITICAL", 3, 120)

    # disable refund_order for the tenant with the list action
    admin.goto("/admin/tools/tenanttoolpolicy/")
    refund_entry = TenantToolPolicy.objects.get(tenant=tenant, tool__name="refund_order")
    admin.page.check(f"input[name=_selected_action][value='{refund_entry.pk}']")
    admin.page.select_option("select[name=action]", "disable_entries")
    admin.page.click("button[name=index]")
    expect(admin.page.locator(".messagelist .success")).to_contain_text("disabled")
    admin.shot("4-disabled")
    assert TenantToolPolicy.objects.get(pk=refund_entry.pk).enabled is False
    assert TenantToolPolicy.objects.get(tenant=outsider.tenant, tool__name="refund_order").enabled is True

    # guardian's object permissions: only acme's people and groups; grant use_tool to acme-nobody
    admin.goto(f"/admin/tools/tool/{inventory.pk}/permissions/")
    expect(body).to_contain_text("acme-requester")
    expect(body).not_to_contain_text("globex")
    admin.shot("5-object-permissions")
    admin.page.fill("#id_user", outsider.username)
    admin.page.click("input[name=submit_manage_user]")
    expect(body).to_contain_text("This user does not exist")
    admin.shot("6-other-tenant-user-not-found")
    admin.page.fill("#id_user", nobody.username)
    admin.page.click("input[name=submit_manage_user]")
    expect(admin.page).to_have_url(f"{admin.base_url}/admin/tools/tool/{inventory.pk}/permissions/"
                                   f"user-manage/{nobody.pk}/")
    available = admin.page.locator("#id_permissions_from option")  # Django's filtered select widget
    expect(available).to_have_count(2)
    values = available.evaluate_all("els => els.map(e => e.value)")
    assert sorted(values) == ["approve_tool", "use_tool"]  # never change_tool / delete_tool
    admin.page.select_option("#id_permissions_from", "use_tool")
    admin.page.click("#id_permissions_add")
    admin.shot("7-granting")
    admin.page.click("input#submit")
    expect(admin.page.locator(".messagelist .success")).to_be_visible()
    admin.shot("7b-granted")
    assert User.objects.get(pk=nobody.pk).has_perm("tools.use_tool", inventory)

    # every page resource loaded; Chromium's own /favicon.ico request (the admin has none) logs a 404
    assert failed == [] and all("404 (Not Found)" in e for e in admin.console_errors), admin.console_errors
    failed.clear()
    # the other tenant's objects answer 404 (the browser logs that 404); its audit trail is not listed
    response = admin.page.goto(f"{admin.base_url}/admin/tenancy/user/{outsider.pk}/change/")
    assert response.status == 404
    admin.shot("8-other-tenant-404")
    admin.goto("/admin/audit/auditevent/?decision__exact=CONTROL_CHANGE")
    expect(body).to_contain_text(re.compile("control.change", re.I))
    expect(body).not_to_contain_text("globex")
    admin.shot("9-audit-trail")
    row = AuditEvent.objects.filter(decision="CONTROL_CHANGE", actor=acme_admin, tool_name="cancel_order").first()
    admin.goto(f"/admin/audit/auditevent/{row.pk}/change/")
    expect(body).to_contain_text("tenant_tool_policy acme/cancel_order changed")
    admin.shot("10-audit-row")
    audited = AuditEvent.objects.filter(decision="CONTROL_CHANGE", actor=acme_admin)
    # tightened, disabled, granted (the refused loosening changed nothing); all in acme's trail
    assert sorted(audited.values_list("tool_name", flat=True)) == ["cancel_order", "query_inventory", "refund_order"]
    assert set(audited.values_list("tenant_id", flat=True)) == {tenant.pk}
    assert [(status, url) for status, url in failed if f"/user/{outsider.pk}/" not in url] == []
