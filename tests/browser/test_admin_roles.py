"""A tenant administrator in Chromium: lands on the admin, reads it in Chinese when the browser asks
for it, gives each role from a member's Roles page (approver and administrator through a second
administrator), sees the result on the effective-access page, and grants what is missing there.

Screenshots: test-artifacts/browser/test_*--<person>--<step>.png.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import remove_perm

from agentplatform.controlplane.roles import roles_held
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import is_auditor
from tests.browser.conftest import PHONE
from tools.access import tools_access
from tools.models import Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHINESE = {"extra_http_headers": {"Accept-Language": "zh-Hans,zh;q=0.9"}, "locale": "zh-CN"}


def test_a_tenant_administrator_lands_on_the_admin(open_person, acme_admin):
    from playwright.sync_api import expect

    admin = open_person("acme-admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD)

    expect(admin.page).to_have_url(admin.base_url + "/admin/")


def test_the_admin_speaks_chinese_to_a_chinese_browser_ours_included(open_person, acme_admin, requester):
    from playwright.sync_api import expect

    admin = open_person("acme-admin-zh", **CHINESE)
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    body = admin.page.locator("body")
    expect(admin.page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(body).to_contain_text("欢迎")  # Django's own translation
    expect(admin.page.locator("#site-name")).to_contain_text("agentplatform 管理后台")  # ours
    expect(body).to_contain_text("租户与用户")
    expect(body).to_contain_text("待批准的控制变更")
    admin.shot("0-index")

    admin.goto("/admin/tenancy/user/")
    expect(admin.page.locator("#result_list thead")).to_contain_text("角色")
    expect(admin.page.locator(f"#result_list tr:has-text('{requester.username}')")).to_contain_text("申请人")
    admin.shot("1-users")

    admin.goto(f"/admin/tenancy/user/{requester.pk}/roles/")
    expect(admin.page.locator("h1")).to_contain_text(f"{requester.username} 的角色")
    expect(admin.page.locator("[data-testid=role-grant-auditor]")).to_have_text("设为审计员")
    admin.goto(f"/admin/tools/tool/effective-access/?user={requester.pk}")
    expect(admin.page.locator("h1")).to_have_text("实际权限")
    admin.shot("2-effective-access")

    # the switch: English for this administrator from now on, whatever the browser says
    admin.page.click("[data-testid=language-en]")
    expect(admin.page.locator("h1")).to_have_text("Effective access")
    admin.goto("/admin/")
    expect(admin.page.locator("#site-name")).to_contain_text("agentplatform administration")
    # and the API's errors stay as they are, in the same browser
    response = admin.page.request.get(admin.base_url + "/api/v1/no-such-thing/",
                                      headers={"Accept-Language": "zh-Hans"})
    assert response.status == 404 and response.json()["code"] == "NOT_FOUND"


def _grant_role(admin, user, role: str) -> None:
    from playwright.sync_api import expect

    admin.goto(f"/admin/tenancy/user/{user.pk}/roles/")
    admin.page.click(f"[data-testid=role-grant-{role}]")
    expect(admin.page.locator(".messagelist")).to_be_visible()


def test_the_roles_page_gives_each_role_and_effective_access_shows_it(open_person, acme_admin, acme_admin2,
                                                                       nobody):
    from playwright.sync_api import expect

    admin = open_person("acme-admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    admin.goto("/admin/tenancy/user/")
    admin.page.locator(f"#result_list tr:has-text('{nobody.username}') [data-testid=roles-link]").click()
    roles = admin.page.locator("[data-testid=roles]")
    expect(roles.locator("tr[data-role=requester]")).to_have_attribute("data-held", "no")

    # requester: one click, and every tool of the tenant is offered
    admin.page.click("[data-testid=role-grant-requester]")
    expect(admin.page.locator(".messagelist .success")).to_contain_text("Requester: granted")
    expect(roles.locator("tr[data-role=requester]")).to_have_attribute("data-held", "yes")
    admin.page.click("[data-testid=effective-access-link]")
    results = admin.page.locator("[data-testid=access-result]")
    expect(results.first).to_be_visible()
    assert results.count() == 4 and all("offered" in text for text in results.all_inner_texts())
    admin.shot("1-requester")

    # auditor: at once
    _grant_role(admin, nobody, "auditor")
    expect(roles.locator("tr[data-role=auditor]")).to_have_attribute("data-held", "yes")
    assert is_auditor(User.objects.get(pk=nobody.pk))

    # approver and administrator: proposed, applied only when the second administrator approves
    _grant_role(admin, nobody, "approver")
    expect(admin.page.locator(".messagelist .warning")).to_contain_text("second administrator")
    _grant_role(admin, nobody, "administrator")
    expect(admin.page.locator("[data-testid=roles-pending] li")).to_have_count(2)
    expect(roles.locator("tr[data-role=approver]")).to_have_attribute("data-held", "no")
    admin.shot("2-proposed")
    assert set(roles_held([User.objects.get(pk=nobody.pk)])[nobody.pk]) == {"requester", "auditor"}

    second = open_person("acme-admin2", **PHONE)
    second.sign_in(acme_admin2.username, DEMO_PASSWORD, next_path="/admin/controlplane/pendingcontrolchange/")
    second.page.check("#action-toggle")
    second.page.select_option("select[name=action]", "approve_changes")
    second.page.click("button[name=index]")
    expect(second.page.locator(".messagelist .success")).to_have_count(2)
    second.shot("3-approved")

    admin.goto(f"/admin/tenancy/user/{nobody.pk}/roles/")
    for role in ("requester", "approver", "administrator", "auditor"):
        expect(roles.locator(f"tr[data-role={role}]")).to_have_attribute("data-held", "yes")
    admin.shot("4-all-roles")


def test_grant_on_effective_access_gives_what_is_missing(open_person, acme_admin, requester):
    from playwright.sync_api import expect

    cancel = Tool.objects.get(name="cancel_order")
    remove_perm("tools.use_tool", requester, cancel)
    requester.user_permissions.remove(Permission.objects.get(content_type__app_label="catalog",
                                                             codename="cancel_order"))
    admin = open_person("acme-admin", **PHONE)
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    admin.goto(f"/admin/tools/tool/effective-access/?user={requester.pk}")
    row = admin.page.locator("tr[data-tool=cancel_order]")
    expect(row.locator("[data-testid=access-result]")).to_contain_text("refused")
    expect(admin.page.locator("tr[data-tool=query_inventory] [data-testid=access-grant]")).to_have_count(0)
    admin.shot("0-missing")

    row.locator("[data-testid=access-grant]").click()

    expect(admin.page.locator(".messagelist .success")).to_contain_text("granted to acme-requester")
    expect(row.locator("[data-testid=access-result]")).to_contain_text("offered")
    expect(row.locator("[data-testid=access-grant]")).to_have_count(0)
    admin.shot("1-granted")
    assert next(a for a in tools_access(user=User.objects.get(pk=requester.pk)) if a.tool == "cancel_order").allowed
