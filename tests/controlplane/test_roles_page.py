"""The Roles page of a member and the effective-access page's Grant: one place gives each role its
grants, under the same rules as every other path (dual control for approvers and administrators,
only permissions the administrator holds, 404 for another tenant's member)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from guardian.shortcuts import get_perms, remove_perm

from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.role_grants import role_set
from agentplatform.controlplane.roles import roles_held
from agentplatform.controlplane.services import control_change_approve
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import AUDITOR_PERMISSION, is_auditor
from audit.models import AuditEvent
from tools.access import tools_access
from tools.models import Tool

pytestmark = pytest.mark.django_db


def _roles_url(user) -> str:
    return reverse("admin:tenancy_user_roles", args=[user.pk])


def _post_role(client, user, role: str, op: str = "grant"):
    return client.post(_roles_url(user), {"role": role, "op": op})


def test_making_someone_a_requester_takes_one_click_and_effective_access_shows_it(client, acme_admin, nobody):
    client.force_login(acme_admin)
    assert not any(a.allowed for a in tools_access(user=nobody))
    before = AuditEvent.objects.filter(tenant=nobody.tenant).count()

    response = _post_role(client, nobody, "requester")

    assert response.status_code == 302
    nobody = User.objects.get(pk=nobody.pk)
    assert "requester" in roles_held([nobody])[nobody.pk]
    assert all(a.allowed for a in tools_access(user=nobody) if a.condition("tenant").held)
    assert AuditEvent.objects.filter(tenant=nobody.tenant).count() > before  # every grant audited
    page = client.get(reverse("admin:tools_tool_effective_access"), {"user": nobody.pk})
    assert all(row.allowed for row in page.context["rows"] if row.condition("tenant").held)


def test_an_approver_needs_a_second_administrator(client, acme_admin, acme_admin2, nobody):
    client.force_login(acme_admin)

    _post_role(client, nobody, "approver")

    assert "approver" not in roles_held([nobody])[nobody.pk]  # nothing applied by one person
    change = PendingControlChange.objects.get(status="PENDING", target__user_id=nobody.pk)
    assert change.kind == PendingControlChange.Kind.MEMBERSHIP
    assert "acme-approvers" in client.get(_roles_url(nobody)).content.decode()  # shown as waiting
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert "approver" in roles_held([User.objects.get(pk=nobody.pk)])[nobody.pk]


def test_an_administrator_needs_a_second_administrator(client, acme_admin, acme_admin2, nobody):
    client.force_login(acme_admin)

    outcome = role_set(actor=acme_admin, user_id=nobody.pk, role="administrator", grant=True)

    assert outcome.outcome == "proposed"
    assert not User.objects.get(pk=nobody.pk).is_staff
    control_change_approve(change_id=outcome.changes[0].pk, approver=acme_admin2)
    assert User.objects.get(pk=nobody.pk).is_staff


def test_an_auditor_joins_the_tenants_auditors_group(client, acme_admin, nobody):
    client.force_login(acme_admin)

    _post_role(client, nobody, "auditor")

    group = Group.objects.get(name="acme-auditors")
    assert group.tenant_link.tenant_id == nobody.tenant_id
    assert group.permissions.filter(codename=AUDITOR_PERMISSION.split(".")[1]).exists()
    assert is_auditor(User.objects.get(pk=nobody.pk))
    _post_role(client, nobody, "auditor", op="revoke")
    assert not is_auditor(User.objects.get(pk=nobody.pk))


def test_roles_can_be_taken_away_without_a_second_person(client, acme_admin, requester, approver1):
    client.force_login(acme_admin)

    _post_role(client, requester, "requester", op="revoke")
    _post_role(client, approver1, "approver", op="revoke")

    assert "requester" not in roles_held([requester])[requester.pk]
    assert "approver" not in roles_held([approver1])[approver1.pk]


def test_an_administrator_cannot_take_their_own_role_away(client, acme_admin):
    client.force_login(acme_admin)

    response = client.post(_roles_url(acme_admin), {"role": "administrator", "op": "revoke"}, follow=True)

    assert User.objects.get(pk=acme_admin.pk).is_staff
    assert "ROLE_REFUSED" in response.content.decode()


def test_a_service_account_is_never_made_an_approver(client, acme_admin, people):
    integration = people["acme"]["integration"]
    client.force_login(acme_admin)

    response = client.post(_roles_url(integration), {"role": "approver", "op": "grant"}, follow=True)

    assert "approver" not in roles_held([integration])[integration.pk]
    assert not PendingControlChange.objects.filter(target__user_id=integration.pk).exists()
    assert "SERVICE_ACCOUNT_REFUSED" in response.content.decode()


def test_another_tenants_member_and_an_operator_answer_404(client, acme_admin, outsider, operator):
    client.force_login(acme_admin)

    assert client.get(_roles_url(outsider)).status_code == 404
    assert client.post(_roles_url(outsider), {"role": "requester", "op": "grant"}).status_code == 404
    assert client.get(_roles_url(operator)).status_code == 404
    assert "use_tool" in get_perms(outsider, Tool.objects.get(name="cancel_order"))  # untouched, as seeded


def test_people_who_are_not_administrators_cannot_reach_the_page(client, requester, nobody):
    client.force_login(requester)

    response = client.post(_roles_url(nobody), {"role": "requester", "op": "grant"})

    assert response.status_code in (302, 404)
    assert "requester" not in roles_held([nobody])[nobody.pk]


def test_the_users_list_shows_each_members_roles_in_a_fixed_number_of_queries(client, acme_admin,
                                                                             django_assert_max_num_queries):
    client.force_login(acme_admin)

    with django_assert_max_num_queries(30):
        page = client.get(reverse("admin:tenancy_user_changelist"))

    html = page.content.decode()
    assert html.count('data-testid="roles-link"') == User.objects.filter(tenant=acme_admin.tenant).count()
    assert "Approver" in html and "Requester" in html and "Administrator" in html


def test_grant_on_effective_access_gives_what_is_missing_and_only_what_the_administrator_holds(client, acme_admin,
                                                                                            requester):
    cancel = Tool.objects.get(name="cancel_order")
    remove_perm("tools.use_tool", requester, cancel)
    requester.user_permissions.remove(Permission.objects.get(content_type__app_label="catalog",
                                                             codename="cancel_order"))
    client.force_login(acme_admin)
    url = reverse("admin:tools_tool_effective_access")

    client.post(url, {"user": requester.pk, "grant": cancel.pk})

    user = User.objects.get(pk=requester.pk)
    assert next(a for a in tools_access(user=user) if a.tool == "cancel_order").allowed
    # a permission the administrator does not hold is not given
    acme_admin.user_permissions.remove(Permission.objects.get(content_type__app_label="catalog",
                                                              codename="cancel_order"))
    user.user_permissions.remove(Permission.objects.get(content_type__app_label="catalog", codename="cancel_order"))
    page = client.post(url, {"user": requester.pk, "grant": cancel.pk}, follow=True).content.decode()
    assert not User.objects.get(pk=requester.pk).has_perm("catalog.cancel_order")
    assert "catalog.cancel_order" in page


def test_grant_for_another_tenants_member_answers_404(client, acme_admin, outsider):
    client.force_login(acme_admin)
    cancel = Tool.objects.get(name="cancel_order")

    response = client.post(reverse("admin:tools_tool_effective_access"), {"user": outsider.pk, "grant": cancel.pk})

    assert response.status_code == 404


def test_a_group_page_shows_its_members_and_the_list_their_number(client, acme_admin, approver1, approver2):
    group = Group.objects.get(name="acme-approvers")
    client.force_login(acme_admin)

    page = client.get(reverse("admin:auth_group_change", args=[group.pk])).content.decode()
    listing = client.get(reverse("admin:auth_group_changelist"))

    assert approver1.username in page and approver2.username in page
    assert reverse("admin:tenancy_user_change", args=[approver1.pk]) in page
    counted = {g.name: g.member_total for g in listing.context["cl"].result_list}
    assert counted["acme-approvers"] == group.user_set.count() == 2


def test_taking_away_a_role_held_through_a_platform_wide_group_says_it_stays(client, acme_admin, approver1):
    """A tenant administrator cannot change an operator's platform-wide group: the Roles page must
    not report the approver role gone while the member still approves through it."""
    from guardian.shortcuts import assign_perm

    platform_group = Group.objects.create(name="platform-reviewers")  # no tenant: operators' only
    assign_perm("tools.approve_tool", platform_group, Tool.objects.get(name="refund_order"))  # no acting person
    approver1.groups.add(platform_group)
    client.force_login(acme_admin)

    page = _post_role(client, approver1, "approver", op="revoke")

    assert "approver" in roles_held([approver1])[approver1.pk]
    shown = [str(m) for m in page.wsgi_request._messages]
    assert any("still hold this role through a group" in m for m in shown), shown
