"""Service accounts (docs/roles.md, "Service accounts"): a program's account signs in nowhere but the
API, may use tools, and can never hold approve_tool or count toward a quorum, on every path that
changes who holds what: guardian's assign_perm, group membership from either side, global
permissions from either side, a group that gains approve_tool, an approver turned into a service
account, the admin's forms and guardian's pages (shown as a message, never a 500), and the
approvals services themselves."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.runtime import services as runtime
from agentplatform.tenancy.models import User
from agentplatform.tenancy.service_accounts import ServiceAccountRefused
from approvals import approver_actions, rules
from approvals.errors import ApprovalForbidden
from approvals.models import Approval, ConfirmationRequest
from tests.controlplane.conftest import admin_url
from tools.models import Tool

REFUND = "A202607290003"


@pytest.fixture
def integration(people) -> User:
    return people["acme"]["integration"]


@pytest.fixture
def approvers_group(people) -> Group:
    return Group.objects.get(name="acme-approvers")


def _approve_permission() -> Permission:
    return Permission.objects.get(codename="approve_tool", content_type__app_label="tools")


def test_the_seeded_service_account_uses_read_only_tools_with_its_key_and_never_signs_in(client, integration):
    assert integration.is_service_account and not integration.has_usable_password()
    integration.set_password("a-password-someone-set-91")
    integration.save()
    assert not User.objects.get(pk=integration.pk).has_usable_password()  # discarded on save
    response = client.post("/accounts/login/", {"username": integration.username,
                                                "password": "a-password-someone-set-91"})
    assert response.status_code == 200 and "_auth_user_id" not in client.session  # the sign-in form refused it
    client.force_login(integration)  # a session naming it (however made) is not honoured
    assert client.get("/chat/").status_code == 302

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=integration)}")
    names = sorted(t["name"] for t in api.get("/api/v1/tools/").json())
    assert names == ["list_orders", "query_inventory"]


def test_use_tool_may_be_granted_but_approve_tool_never(integration):
    refund = Tool.objects.get(name="refund_order")
    assign_perm("tools.use_tool", integration, refund)  # allowed
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        assign_perm("tools.approve_tool", integration, refund)
    assert not UserObjectPermission.objects.filter(user=integration, permission__codename="approve_tool").exists()


def test_a_service_account_never_joins_a_group_that_approves_from_either_side(integration, approvers_group):
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        integration.groups.add(approvers_group)
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        approvers_group.user_set.add(integration)
    assert not integration.groups.exists()
    plain = Group.objects.create(name="acme-readers")
    integration.groups.add(plain)  # a group without approve_tool is fine
    assert list(integration.groups.all()) == [plain]


def test_a_group_with_a_service_account_never_gains_approve_tool(integration):
    group = Group.objects.create(name="acme-bots")
    group.user_set.add(integration)
    refund = Tool.objects.get(name="refund_order")
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        assign_perm("tools.approve_tool", group, refund)
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        group.permissions.add(_approve_permission())
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        _approve_permission().group_set.add(group)
    assign_perm("tools.use_tool", group, refund)  # use_tool stays grantable


def test_a_global_approve_tool_is_refused_from_either_side(integration):
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        integration.user_permissions.add(_approve_permission())
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        _approve_permission().user_set.add(integration)
    assert not integration.user_permissions.filter(codename="approve_tool").exists()


def test_an_accounts_kind_is_fixed_and_an_approver_never_becomes_a_service_account(approver1, nobody, integration):
    approver1.is_service_account = True
    with pytest.raises(ServiceAccountRefused, match="holds approve_tool"), transaction.atomic():
        approver1.save()
    nobody.is_service_account = True
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        nobody.save()  # an administrator would then receive a key that acts as this person
    integration.is_service_account = False
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        integration.save()  # whoever received its key would then hold a person's
    fresh = User.objects.get(pk=integration.pk)
    fresh.is_staff = True
    with pytest.raises(ServiceAccountRefused), transaction.atomic():
        fresh.save()
    assert User.objects.filter(pk__in=[approver1.pk, nobody.pk], is_service_account=True).count() == 0


def test_the_admin_shows_a_refused_membership_as_a_message(client, acme_admin, integration, approvers_group):
    client.force_login(acme_admin)
    form = {"username": integration.username, "email": integration.email, "is_active": "on",
            "groups": [approvers_group.pk]}
    response = client.post(admin_url(User, "change", integration.pk), form, follow=True)
    assert response.status_code == 200
    assert "SERVICE_ACCOUNT_REFUSED" in response.content.decode()
    assert not integration.groups.exists()


def test_guardians_page_shows_a_refused_grant_as_a_message(client, acme_admin, operator, integration):
    refund = Tool.objects.get(name="refund_order")
    for admin_user in (acme_admin, operator):
        client.force_login(admin_user)
        url = admin_url(Tool, "permissions_manage_user", refund.pk, integration.pk)
        response = client.post(url, {"permissions": ["use_tool", "approve_tool"]}, follow=True)
        assert response.status_code == 200
        assert "SERVICE_ACCOUNT_REFUSED" in response.content.decode()
        assert not integration.has_perm("tools.approve_tool", refund)
        assert not UserObjectPermission.objects.filter(user=integration, permission__codename="approve_tool").exists()


def test_a_grant_that_bypassed_the_signals_still_never_lets_it_decide_or_count(integration, approver1, requester):
    refund = Tool.objects.get(name="refund_order")
    # guardian's bulk assign (bulk_create) sends no signal: the backends and the services still refuse
    UserObjectPermission.objects.bulk_create([UserObjectPermission(
        user=integration, permission=_approve_permission(), content_object=refund)])
    integration = User.objects.get(pk=integration.pk)
    assert not integration.has_perm("tools.approve_tool", refund)
    outcome = runtime.chat_send(user=requester, message=f"Refund order {REFUND} because it arrived damaged")
    request_id = outcome.pending[0].confirmation_id
    with pytest.raises(ApprovalForbidden, match="service account"):
        approver_actions.confirmation_approve(request_id=request_id, approver=integration)
    request = ConfirmationRequest.objects.get(pk=request_id)
    # a decision row written behind the services' back is not counted either
    Approval.objects.create(request=request, approver=integration, decision=Approval.Decision.APPROVE,
                            revision=request.revision, arguments_hash=request.arguments_hash)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    request.refresh_from_db()
    assert request.status == ConfirmationRequest.Status.PENDING  # 1 of 2: the service account's row is not counted
    assert [a.approver_id for a in rules.standing_approvals(request)] == [approver1.pk]


def test_the_admin_offers_no_password_for_a_service_account(client, acme_admin, integration):
    client.force_login(acme_admin)
    url = f"/admin/tenancy/user/{integration.pk}/password/"
    response = client.post(url, {"password1": "x-Very-long-pass-91", "password2": "x-Very-long-pass-91",
                                 "usable_password": "true"}, follow=True)
    assert "signs in with its API key only" in response.content.decode()
    assert not User.objects.get(pk=integration.pk).has_usable_password()
