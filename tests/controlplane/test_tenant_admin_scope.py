"""A tenant administrator sees only their tenant in /admin/ and cannot escalate (docs/roles.md).

Every registered admin is walked: each object of the other tenant answers 404 on its change,
history and delete pages (and the user password page, guardian's grant pages), and no changelist
mentions the other tenant.
"""
from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from agentplatform.api.models import ApiKey
from agentplatform.tenancy.credentials import api_key_issue
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.tenancy.admin_scope import TenantScopedMixin
from agentplatform.tenancy.models import Tenant, TenantGroup, User
from tests.controlplane.conftest import admin_url
from tools.models import Tool

pytestmark = pytest.mark.django_db(transaction=False)


def _globex_rows(model_admin, globex: Tenant) -> list:
    model = model_admin.model
    return list(model._default_manager.filter(**{model_admin.tenant_path: globex.pk}))


def test_every_registered_admin_is_tenant_scoped():
    unscoped = [m.__name__ for m, a in admin.site._registry.items() if not isinstance(a, TenantScopedMixin)]
    assert unscoped == []
    for model_admin in admin.site._registry.values():
        for inline in model_admin.inlines:
            assert issubclass(inline, TenantScopedMixin), inline


def test_tenant_admin_gets_404_on_every_page_of_the_other_tenants_objects(client, acme_admin, globex_evidence):
    globex = globex_evidence["requester"].tenant
    client.force_login(acme_admin)
    checked = {}
    for model, model_admin in admin.site._registry.items():
        if model_admin.tenant_path is None:
            continue  # tools are shared by every tenant
        rows = _globex_rows(model_admin, globex)
        assert rows, f"no globex {model.__name__} to try"
        for row in rows:
            pk = row.pk
            for action in ("change", "history", "delete"):
                response = client.get(admin_url(model, action, pk))
                assert response.status_code == 404, (model.__name__, action, response.status_code)
            assert client.post(admin_url(model, "delete", pk), {"post": "yes"}).status_code == 404
        checked[model.__name__] = len(rows)
    for user in User.objects.filter(tenant=globex):
        assert client.get(f"/admin/tenancy/user/{user.pk}/password/").status_code == 404
    assert {"AuditEvent", "ConfirmationRequest", "Approval", "Conversation", "Run", "RunEvent", "IdempotencyRecord",
            "HttpIdempotencyKey", "TenantToolPolicy", "User", "Group", "ApiKey", "Tenant", "Order", "Refund",
            "Cancellation", "StockLevel", "WebhookEndpoint", "WebhookDelivery", "PendingControlChange", "McpCall", "TenantRetention"} <= set(checked)
    assert ApiKey.objects.filter(user=globex_evidence["requester"]).exists()


def test_no_changelist_or_filter_mentions_the_other_tenant(client, acme_admin, globex_evidence):
    client.force_login(acme_admin)
    index = client.get("/admin/").content.decode()
    assert "globex" not in index.lower()
    for model, model_admin in admin.site._registry.items():
        response = client.get(admin_url(model, "changelist"))
        if not model_admin.tenant_admin_can:  # operators only (django-axes' sign-in records)
            assert response.status_code == 403, model.__name__
            continue
        assert response.status_code == 200, model.__name__
        assert "globex" not in response.content.decode().lower(), model.__name__


def test_guardian_pages_do_not_reach_the_other_tenant(client, acme_admin, globex_evidence):
    client.force_login(acme_admin)
    tool = Tool.objects.get(name="refund_order")
    globex_user = globex_evidence["requester"]
    globex_group = Group.objects.get(name="globex-approvers")

    page = client.get(reverse("admin:tools_tool_permissions", args=[tool.pk])).content.decode()
    assert "acme-approvers" in page and "globex" not in page
    picked = client.post(reverse("admin:tools_tool_permissions", args=[tool.pk]),
                         {"user": globex_user.username, "submit_manage_user": "1"})
    assert picked.status_code == 200 and "This user does not exist" in picked.content.decode()
    picked = client.post(reverse("admin:tools_tool_permissions", args=[tool.pk]),
                         {"group": globex_group.name, "submit_manage_group": "1"})
    assert picked.status_code == 200 and "This group does not exist" in picked.content.decode()
    user_page = reverse("admin:tools_tool_permissions_manage_user", args=[tool.pk, globex_user.pk])
    group_page = reverse("admin:tools_tool_permissions_manage_group", args=[tool.pk, globex_group.pk])
    assert client.get(user_page).status_code == 404
    assert client.post(user_page, {"permissions": ["use_tool", "approve_tool"]}).status_code == 404
    assert client.post(group_page, {"permissions": ["approve_tool"]}).status_code == 404
    assert not User.objects.get(pk=globex_user.pk).has_perm("tools.approve_tool", tool)


def test_a_platform_wide_group_is_out_of_a_tenant_admins_reach(client, acme_admin, nobody):
    platform_group = Group.objects.create(name="platform-auditors")
    client.force_login(acme_admin)
    tool = Tool.objects.get(name="query_inventory")
    assert client.get(admin_url(Group, "change", platform_group.pk)).status_code == 404
    group_page = reverse("admin:tools_tool_permissions_manage_group", args=[tool.pk, platform_group.pk])
    assert client.post(group_page, {"permissions": ["use_tool"]}).status_code == 404
    # adding a member of the tenant to it is refused too
    response = client.post(admin_url(User, "change", nobody.pk), _user_form(nobody, groups=[platform_group.pk]))
    assert response.status_code == 200
    assert not nobody.groups.filter(pk=platform_group.pk).exists()


def _user_form(user: User, **overrides) -> dict:
    form = {"username": user.username, "first_name": user.first_name, "last_name": user.last_name,
            "email": user.email, "is_active": "on" if user.is_active else "",
            "is_staff": "on" if user.is_staff else "",
            "groups": [g.pk for g in user.groups.all()],
            "user_permissions": [p.pk for p in user.user_permissions.all()]}
    form.update(overrides)
    return {k: v for k, v in form.items() if v != ""}


def test_tenant_admin_cannot_make_anyone_superuser_or_move_them_to_another_tenant(client, acme_admin, nobody,
                                                                                  outsider):
    client.force_login(acme_admin)
    for target in (acme_admin, nobody):
        response = client.post(admin_url(User, "change", target.pk),
                               _user_form(target, is_superuser="on", tenant=str(outsider.tenant_id)))
        assert response.status_code == 302, response.content.decode()[:2000]
        fresh = User.objects.get(pk=target.pk)
        assert fresh.is_superuser is False
        assert fresh.tenant_id == acme_admin.tenant_id


def test_tenant_admin_makes_a_member_tenant_admin_of_the_same_tenant_only(client, acme_admin, acme_admin2, nobody):
    client.force_login(acme_admin)
    response = client.post(admin_url(User, "change", nobody.pk), _user_form(nobody, is_staff="on"))
    assert response.status_code == 302
    # a proposal (a second administrator would be the second person of every later change)
    assert not User.objects.get(pk=nobody.pk).is_staff
    from agentplatform.controlplane.models import PendingControlChange
    from agentplatform.controlplane.services import control_change_approve

    change = PendingControlChange.objects.get(kind="ADMIN", target__user_id=nobody.pk)
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    fresh = User.objects.get(pk=nobody.pk)
    assert fresh.is_staff and not fresh.is_superuser and fresh.tenant_id == acme_admin.tenant_id


def test_tenant_admin_cannot_grant_permissions_they_do_not_hold(client, acme_admin, nobody):
    client.force_login(acme_admin)
    change_tool = Permission.objects.get(codename="change_tool")
    view_order = Permission.objects.get(codename="view_order")  # held by acme-admin (seed)
    refused = client.post(admin_url(User, "change", nobody.pk), _user_form(nobody, user_permissions=[change_tool.pk]))
    assert refused.status_code == 200
    assert not User.objects.get(pk=nobody.pk).has_perm("tools.change_tool")

    granted = client.post(admin_url(User, "change", nobody.pk), _user_form(nobody, user_permissions=[view_order.pk]))
    assert granted.status_code == 302
    assert User.objects.get(pk=nobody.pk).has_perm("catalog.view_order")

    # nor on a tool's object-permission page: only use_tool and approve_tool are offered and saved
    tool = Tool.objects.get(name="query_inventory")
    page = reverse("admin:tools_tool_permissions_manage_user", args=[tool.pk, nobody.pk])
    refused = client.post(page, {"permissions": ["use_tool", "change_tool", "delete_tool"]})
    assert refused.status_code == 200  # "not one of the available choices"
    fresh = User.objects.get(pk=nobody.pk)
    assert not fresh.has_perm("tools.change_tool", tool) and not fresh.has_perm("tools.use_tool", tool)
    assert client.post(page, {"permissions": ["use_tool"]}).status_code == 302
    assert User.objects.get(pk=nobody.pk).has_perm("tools.use_tool", tool)


def test_ticked_boxes_do_not_widen_the_role(client, acme_admin, outsider):
    """Even with every global permission ticked, a tenant administrator stays in their tenant."""
    acme_admin.user_permissions.add(*Permission.objects.all())
    client.force_login(acme_admin)
    assert client.get(admin_url(User, "change", outsider.pk)).status_code == 404
    tool = Tool.objects.get(name="refund_order")
    response = client.post(admin_url(Tool, "change", tool.pk), {"enabled": "on", "risk_override": "LOW"})
    assert response.status_code == 403
    assert Tool.objects.get(pk=tool.pk).risk_override == ""
    assert client.get(admin_url(Tenant, "add")).status_code == 403


def test_tenant_admin_cannot_issue_or_revoke_tokens_of_another_tenant(client, acme_admin, outsider, people):
    client.force_login(acme_admin)
    theirs, _ = api_key_issue(user=outsider, name="globex key")
    response = client.post(admin_url(User, "changelist"),
                           {"action": "issue_service_account_key", "_selected_action": [outsider.pk]})
    assert response.status_code == 302  # nothing selected in their scope
    assert list(ApiKey.objects.filter(user=outsider)) == [theirs]
    assert client.post(admin_url(ApiKey, "delete", theirs.pk), {"post": "yes"}).status_code == 404
    assert ApiKey.objects.filter(pk=theirs.pk).exists()
    operator_key, _ = api_key_issue(user=User.objects.get(username="platform-operator"), name="operator key")
    assert client.post(admin_url(ApiKey, "delete", operator_key.pk), {"post": "yes"}).status_code == 404

    mine, _ = api_key_issue(user=people["acme"]["requester"], name="acme key")  # their own tenant: works
    assert client.post(admin_url(ApiKey, "delete", mine.pk), {"post": "yes"}).status_code == 302
    assert not ApiKey.objects.filter(pk=mine.pk).exists()


def test_tenant_admin_group_lands_in_their_tenant(client, acme_admin):
    client.force_login(acme_admin)
    response = client.post(admin_url(Group, "add"), {"name": "acme-reviewers"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert TenantGroup.objects.get(group__name="acme-reviewers").tenant_id == acme_admin.tenant_id


def test_tenant_admin_adds_members_only_to_their_tenant(client, acme_admin, outsider):
    client.force_login(acme_admin)
    response = client.post(admin_url(User, "add"), {"username": "acme-newbie", "password1": "x-Very-long-pass-91",
                                                     "password2": "x-Very-long-pass-91", "usable_password": "true",
                                                     "tenant": str(outsider.tenant_id), "is_superuser": "on"})
    assert response.status_code == 302, response.content.decode()[:3000]
    newbie = User.objects.get(username="acme-newbie")
    assert newbie.tenant_id == acme_admin.tenant_id and not newbie.is_superuser


def test_staff_without_a_tenant_administers_nothing(client, db):
    stray = User.objects.create_user("stray-staff", password="x", is_staff=True)
    stray.user_permissions.add(*Permission.objects.all())
    client.force_login(stray)
    assert client.get(admin_url(Tool, "changelist")).status_code == 403
    assert client.get(admin_url(User, "changelist")).status_code == 403


def test_tenant_admin_cannot_delegate_a_permission_through_a_group_they_could_not_grant(client, acme_admin, nobody):
    """An operator gave an acme group a permission the tenant administrator does not hold: adding a
    member to it would delegate that permission, so it is refused; a group within their means is not."""
    strong = Group.objects.create(name="acme-tool-editors")
    TenantGroup.objects.create(group=strong, tenant=acme_admin.tenant)
    strong.permissions.add(Permission.objects.get(codename="change_tool"))
    approvers = Group.objects.get(name="acme-approvers")  # object grants only, no global permission
    client.force_login(acme_admin)

    refused = client.post(admin_url(User, "change", nobody.pk), _user_form(nobody, groups=[strong.pk]))
    assert refused.status_code == 200
    assert not User.objects.get(pk=nobody.pk).groups.filter(pk=strong.pk).exists()
    # within their means, but the group holds approve_tool: a proposal for a second administrator
    added = client.post(admin_url(User, "change", nobody.pk), _user_form(nobody, groups=[approvers.pk]))
    assert added.status_code == 302
    assert not User.objects.get(pk=nobody.pk).groups.filter(pk=approvers.pk).exists()
    assert PendingControlChange.objects.get(kind="MEMBERSHIP", status="PENDING").proposed_by == acme_admin
