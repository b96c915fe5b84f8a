"""An insider makes their own *second administrator* and approves their own control changes with
it: a tenant administrator ticking `is_staff` on an account they created, an operator making a
second superuser. Making someone an administrator (or operator) is itself a control change that a
second person approves (docs/roles.md, "Trust model")."""
from __future__ import annotations

import pytest
from django.urls import reverse

from agentplatform.controlplane.errors import ControlChangeForbidden, ControlChangeRequired
from agentplatform.controlplane.guards.gate import Gated
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.services import control_change_approve, control_change_propose
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import User
from tools.models import Tool
from tests.adversarial.test_insider_credentials import _change_form

Status = PendingControlChange.Status


def _grant_proposal(proposer: User, user: User) -> PendingControlChange:
    refund = Tool.objects.get(name="refund_order")
    return control_change_propose(proposer=proposer, gated=Gated(
        "USER_GRANT", user.tenant_id, {"user_id": user.pk, "tool_id": refund.pk}, {"approve_tool": False},
        {"approve_tool": True, "tool": "refund_order", "user": user.username},
        f"grant approve_tool on refund_order to {user.username}"))


def test_a_tenant_administrator_cannot_make_a_second_administrator_alone(client, acme_admin, nobody):
    # given: acme-admin creates an account in the admin (it knows the password it typed)
    client.force_login(acme_admin)
    response = client.post(reverse("admin:tenancy_user_add"), {
        "username": "acme-shadow", "password1": "shadow-pass-123!", "password2": "shadow-pass-123!",
        "usable_password": "true", "is_service_account": ""})
    assert response.status_code == 302, response.content[:500]
    shadow = User.objects.get(username="acme-shadow")

    # when: it ticks "staff status" on it
    response = client.post(reverse("admin:tenancy_user_change", args=[shadow.pk]),
                           _change_form(client, shadow, is_staff="on"))

    # then: that is a proposal, not an administrator
    assert response.status_code == 302
    assert not User.objects.get(pk=shadow.pk).is_staff
    change = PendingControlChange.objects.get(kind="ADMIN", status=Status.PENDING)
    assert change.target["user_id"] == shadow.pk and change.proposed_by_id == acme_admin.pk
    # and the shadow can decide nothing: the grant acme-admin proposes still needs a real second person
    grant = _grant_proposal(acme_admin, nobody)
    with pytest.raises(Exception):
        control_change_approve(change_id=grant.pk, approver=User.objects.get(pk=shadow.pk))
    assert PendingControlChange.objects.get(pk=grant.pk).status == Status.PENDING
    # and acme-admin cannot approve its own ADMIN proposal either
    with pytest.raises(ControlChangeForbidden):
        control_change_approve(change_id=change.pk, approver=acme_admin)


def test_a_second_administrator_approves_a_new_administrator(acme_admin, acme_admin2, nobody):
    with acting_as(acme_admin), pytest.raises(ControlChangeRequired) as refused:
        fresh = User.objects.get(pk=nobody.pk)
        fresh.is_staff = True
        fresh.save()
    change = control_change_propose(proposer=acme_admin, gated=refused.value.gated[0])
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert User.objects.get(pk=nobody.pk).is_staff
    assert PendingControlChange.objects.get(pk=change.pk).status == Status.APPLIED


def test_an_account_is_not_created_as_an_administrator_by_a_person(acme_admin, operator):
    for who in (acme_admin, operator):
        with acting_as(who), pytest.raises(ControlChangeForbidden):
            User.objects.create(username=f"born-staff-{who.pk}", tenant=acme_admin.tenant, is_staff=True)
    assert not User.objects.filter(username__startswith="born-staff").exists()


def test_an_operator_cannot_make_a_second_operator_alone(acme_admin, operator, nobody):
    with acting_as(operator):
        shadow = User.objects.create(username="shadow-operator")
        shadow.is_superuser = True
        with pytest.raises(ControlChangeRequired) as refused:
            shadow.save()
    assert not User.objects.get(pk=shadow.pk).is_superuser
    change = control_change_propose(proposer=operator, gated=refused.value.gated[0])
    assert change.tenant_id is None  # platform-wide: another operator decides, never a tenant administrator
    with pytest.raises(Exception):
        control_change_approve(change_id=change.pk, approver=acme_admin)
    assert not User.objects.get(pk=shadow.pk).is_superuser


def test_re_activating_an_administrator_needs_a_second_person(acme_admin, acme_admin2):
    with acting_as(acme_admin):
        other = User.objects.get(pk=acme_admin2.pk)
        other.is_active = False
        other.save()  # deactivating is immediate
        other.is_active = True
        with pytest.raises(ControlChangeRequired):
            other.save()
    assert not User.objects.get(pk=acme_admin2.pk).is_active


def test_a_staff_account_without_a_tenant_is_not_given_one_by_a_person(operator, acme_admin):
    idle = User.objects.create(username="idle-staff", is_staff=True)  # at a shell: administers nothing
    with acting_as(operator), pytest.raises(ControlChangeForbidden):
        idle.tenant = acme_admin.tenant
        idle.save()
    assert User.objects.get(pk=idle.pk).tenant_id is None
