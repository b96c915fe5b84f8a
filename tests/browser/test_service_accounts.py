"""Service accounts and owner-only keys in Chromium: a tenant administrator cannot put the tenant's
service account among the approvers (user form, guardian's page), cannot obtain a person's key
from the users' action, and does obtain the service account's key once; the service account
cannot sign in to the web pages. Refusals show as messages on the page, never as a server error.

Screenshots go to test-artifacts/browser/.
"""
from __future__ import annotations

import re

import pytest

from agentplatform.api.models import ApiKey
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from tools.models import Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_administrator_cannot_make_the_service_account_an_approver_nor_take_a_persons_key(
        open_person, people, acme_admin, approver1):
    from playwright.sync_api import expect

    integration = people["acme"]["integration"]
    refund = Tool.objects.get(name="refund_order")
    admin = open_person("acme-admin")
    server_errors = []
    admin.page.on("response", lambda r: r.status >= 500 and server_errors.append((r.status, r.url)))
    admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
    body = admin.page.locator("body")

    # the user form: put the service account into acme-approvers
    admin.goto(f"/admin/tenancy/user/{integration.pk}/change/")
    admin.page.select_option("#id_groups_from", label="acme-approvers")
    admin.page.click("#id_groups_add")
    admin.page.click("input[name=_save]")
    expect(admin.page.locator(".messagelist .error")).to_contain_text("SERVICE_ACCOUNT_REFUSED")
    admin.shot("1-membership-refused")
    assert not integration.groups.exists()

    # guardian's object-permission page: approve_tool on refund_order
    admin.goto(f"/admin/tools/tool/{refund.pk}/permissions/user-manage/{integration.pk}/")
    admin.page.select_option("#id_permissions_from", label="May approve calls of this tool")
    admin.page.click("#id_permissions_add")
    admin.page.click("input[type=submit]")
    expect(admin.page.locator(".messagelist .error")).to_contain_text("SERVICE_ACCOUNT_REFUSED")
    admin.shot("2-grant-refused")
    assert not integration.has_perm("tools.approve_tool", refund)

    # the users' action: a person's key is refused, the service account's is shown once
    admin.goto("/admin/tenancy/user/")
    admin.page.check(f"input[name=_selected_action][value='{approver1.pk}']")
    admin.page.select_option("select[name=action]", "issue_service_account_key")
    admin.page.click("button[name=index]")
    expect(admin.page.locator(".messagelist .error")).to_contain_text("shown only to the person it authenticates")
    expect(admin.page.locator("[data-testid=api-token]")).to_have_count(0)
    admin.shot("3-persons-key-refused")
    assert not ApiKey.objects.filter(user=approver1).exists()
    admin.page.check(f"input[name=_selected_action][value='{integration.pk}']")
    admin.page.select_option("select[name=action]", "issue_service_account_key")
    admin.page.click("button[name=index]")
    expect(admin.page.locator("[data-testid=api-token]")).to_have_count(1)
    admin.shot("4-service-account-key")
    assert ApiKey.objects.filter(user=integration).count() == 1
    expect(body).to_be_visible()
    assert server_errors == []


def test_a_service_account_cannot_sign_in_to_the_web_pages(open_person, people):
    from playwright.sync_api import expect

    integration = people["acme"]["integration"]
    integration.set_password(DEMO_PASSWORD)
    integration.save()  # discarded: a service account's password is never usable
    program = open_person("acme-integration")
    program.goto("/accounts/login/")
    program.page.fill("#id_username", integration.username)
    program.page.fill("#id_password", DEMO_PASSWORD)
    program.page.click("button[type=submit]")
    expect(program.page.locator("#id_username")).to_be_visible()
    program.shot("refused")
    program.goto("/chat/")
    expect(program.page).to_have_url(re.compile(r"/accounts/login/"))
