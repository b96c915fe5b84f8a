"""Dual control on who may approve (docs/roles.md, "Trust model"): a change that empowers an
approver or loosens a HIGH/CRITICAL policy takes effect only when a second person approves it,
whatever path it was attempted through; tightening stays immediate; every step is audited."""
from __future__ import annotations

import datetime
import uuid
from unittest import mock

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.urls import reverse
from guardian.shortcuts import assign_perm, remove_perm
from rest_framework.test import APIClient

from agentplatform.tenancy.credentials import api_key_issue
from agentplatform.controlplane.errors import (
    ControlChangeAlreadyDecided,
    ControlChangeForbidden,
    ControlChangeNotFound,
    ControlChangeRequired,
    ControlChangeStale,
)
from agentplatform.controlplane.models import PendingControlChange, StandingSource
from agentplatform.controlplane.services import (
    control_change_approve,
    control_change_reject,
    control_changes_expire,
)
from agentplatform.runtime import services as runtime
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import Tenant, User
from audit.models import AuditEvent
from tests.controlplane.conftest import admin_url
from tests.tools.support import race
from tools.catalog.models import Refund
from tools.models import TenantToolPolicy, Tool

Status = PendingControlChange.Status
REFUND_ORDER = "A202607290003"  # acme, PAID, 560.00


def _grant_page(tool: Tool, user: User) -> str:
    return reverse("admin:tools_tool_permissions_manage_user", args=[tool.pk, user.pk])


def _trail(change: PendingControlChange) -> list[str]:
    """The statuses of the change's CONTROL_CHANGE rows, in order."""
    return [row.status for row in AuditEvent.objects.filter(
        decision=AuditEvent.Decision.CONTROL_CHANGE, masked_arguments__object__id=str(change.pk)
    ).order_by("occurred_at", "id")]


def _approve_api(key: str, request_id) -> dict:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    return {"status": response.status_code, **response.json()}


def _approve_in_admin(client, user: User, changes) -> None:
    client.force_login(user)
    response = client.post(admin_url(PendingControlChange, "changelist"),
                           {"action": "approve_changes", "_selected_action": [str(c.pk) for c in changes]})
    assert response.status_code == 302


def test_sock_puppets_fail_at_dual_control_and_then_at_independence(client, acme_admin, acme_admin2, approver1):
    # given: acme-admin creates two accounts of its own
    with acting_as(acme_admin):
        socks = [User.objects.create(username=f"acme-sock{i}", tenant=acme_admin.tenant) for i in (1, 2)]
    refund = Tool.objects.get(name="refund_order")
    client.force_login(acme_admin)

    # when: it grants them approve_tool on refund_order in the admin -> proposals, no effect
    for sock in socks:
        response = client.post(_grant_page(refund, sock), {"permissions": ["approve_tool"]})
        assert response.status_code == 302
        assert response.url == admin_url(PendingControlChange, "changelist")
    assert not any(User.objects.get(pk=s.pk).has_perm("tools.approve_tool", refund) for s in socks)
    changes = list(PendingControlChange.objects.filter(kind="USER_GRANT", status=Status.PENDING))
    assert len(changes) == 2 and {c.proposed_by_id for c in changes} == {acme_admin.pk}
    # and grants itself use_tool (immediate: use_tool is not guarded), then asks for a refund of 500
    assert client.post(_grant_page(refund, acme_admin), {"permissions": ["use_tool"]}).status_code == 302
    first = runtime.chat_send(user=acme_admin, message=f"refund {REFUND_ORDER} amount 500 because damaged")
    assert first.pending and first.pending[0].needs == "approvers"
    keys = [api_key_issue(user=s, name="k")[1] for s in socks]  # issued at a shell (the key-issue refusal bypassed)

    # then: both sock puppets are refused at the approve_tool step
    for key in keys:
        refused = _approve_api(key, first.pending[0].confirmation_id)
        assert (refused["status"], refused["code"]) == (403, "APPROVAL_FORBIDDEN")
    # and acme-admin cannot approve its own proposals
    with pytest.raises(ControlChangeForbidden):
        control_change_approve(change_id=changes[0].pk, approver=acme_admin)

    # when: a second administrator approves the grants in the admin
    _approve_in_admin(client, acme_admin2, changes)
    assert all(User.objects.get(pk=s.pk).has_perm("tools.approve_tool", refund) for s in socks)
    assert {c.status for c in PendingControlChange.objects.filter(pk__in=[c.pk for c in changes])} == {Status.APPLIED}
    assert _trail(changes[0]) == ["PROPOSED", "DENIED", "APPLIED"]  # DENIED: its proposer tried

    # then: a refund acme-admin requests afterwards still cannot be approved by its sock puppets
    second = runtime.chat_send(user=acme_admin, message=f"refund {REFUND_ORDER} amount 500 because it is broken")
    for request_id in (first.pending[0].confirmation_id, second.pending[0].confirmation_id):
        for key in keys:
            refused = _approve_api(key, request_id)
            assert (refused["status"], refused["code"]) == (403, "APPROVER_NOT_INDEPENDENT"), refused
    assert "requester" in _approve_api(keys[0], second.pending[0].confirmation_id)["message"]
    assert not Refund.objects.exists()

    # and the API and the dashboard say who counts and why the sock puppets do not
    real = APIClient()
    real.force_authenticate(approver1)
    [row] = [r for r in real.get("/api/v1/approvals/").json()["results"]
             if r["id"] == second.pending[0].confirmation_id]
    assert row["eligible_approvers"] == ["acme-approver1", "acme-approver2"]
    assert {(i["username"], i["code"]) for i in row["ineligible"]} == {
        ("acme-admin", "REQUESTER"), ("acme-sock1", "GRANTED_BY_REQUESTER"), ("acme-sock2", "GRANTED_BY_REQUESTER")}
    client.force_login(socks[0])
    page = client.get("/approvals/").content.decode()
    assert second.pending[0].confirmation_id not in page and first.pending[0].confirmation_id not in page
    client.force_login(approver1)
    page = client.get("/approvals/").content.decode()
    assert 'data-code="GRANTED_BY_REQUESTER"' in page and "acme-sock1" in page


def test_every_path_of_an_administrator_is_guarded(acme_admin, nobody, approver1):
    refund = Tool.objects.get(name="refund_order")
    approvers = Group.objects.get(name="acme-approvers")
    with acting_as(acme_admin):
        attempts = [
            lambda: assign_perm("tools.approve_tool", nobody, refund),               # guardian shortcut, user
            lambda: assign_perm("tools.approve_tool", approvers, Tool.objects.get(name="query_inventory")),
            lambda: nobody.groups.add(approvers),                                      # membership, forward
            lambda: approvers.user_set.add(nobody),                                    # membership, reverse
        ]
        for attempt in attempts:
            # each in its own atomic block, as every admin view and service runs (the m2m manager's
            # write joins the caller's transaction, which a refusal marks for rollback)
            with pytest.raises(ControlChangeRequired), transaction.atomic():
                attempt()
        # deactivating is tightening: immediate; re-activating an approver is guarded
        approver1.is_active = False
        approver1.save()
        approver1.is_active = True
        with pytest.raises(ControlChangeRequired), transaction.atomic():
            approver1.save()
    assert not User.objects.get(pk=approver1.pk).is_active
    assert not User.objects.get(pk=nobody.pk).groups.exists()
    assert not User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", refund)


def test_tightening_stays_immediate(acme_admin, approver1):
    refund = Tool.objects.get(name="refund_order")
    approvers = Group.objects.get(name="acme-approvers")
    with acting_as(acme_admin):
        remove_perm("tools.approve_tool", approvers, Tool.objects.get(name="cancel_order"))
        approver1.groups.remove(approvers)
        policy = TenantToolPolicy.objects.get(tenant=acme_admin.tenant, tool=refund)
        policy.quorum = 3
        policy.save()
    assert not User.objects.get(pk=approver1.pk).has_perm("tools.approve_tool", refund)
    assert TenantToolPolicy.objects.get(pk=policy.pk).quorum == 3


def test_a_shell_applies_directly_with_no_proposer(nobody):
    refund = Tool.objects.get(name="refund_order")
    assign_perm("tools.approve_tool", nobody, refund)  # no acting person: someone at a shell on the server
    assert User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", refund)
    source = StandingSource.objects.get(kind="USER_GRANT", user=nobody, tool=refund)
    assert (source.proposer_id, source.approver_id, source.applied_by) == (None, None, "shell/seed")


def test_loosening_a_tenant_policy_needs_a_second_administrator(client, acme_admin, acme_admin2, requester):
    refund = Tool.objects.get(name="refund_order")
    policy = TenantToolPolicy.objects.get(tenant=acme_admin.tenant, tool=refund)
    with acting_as(acme_admin):
        policy.quorum = 3
        policy.save()  # tightening: immediate
        policy.quorum = None
        with pytest.raises(ControlChangeRequired), transaction.atomic():
            policy.save()
        with pytest.raises(ControlChangeRequired), transaction.atomic():
            TenantToolPolicy.objects.get(pk=policy.pk).delete()  # back to the global quorum of 2
    # in the admin, the same change becomes a proposal
    client.force_login(acme_admin)
    response = client.post(admin_url(TenantToolPolicy, "change", policy.pk),
                           {"tool": refund.pk, "enabled": "on", "risk_override": "", "quorum": "", "ttl_seconds": ""})
    assert response.status_code == 302
    assert TenantToolPolicy.objects.get(pk=policy.pk).quorum == 3
    change = PendingControlChange.objects.get(kind="TENANT_POLICY", status=Status.PENDING)
    assert (change.old_state, change.new_state) == ({"quorum": 3}, {"quorum": None})
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert TenantToolPolicy.objects.get(pk=policy.pk).quorum is None


def test_who_may_decide(acme_admin, acme_admin2, globex_admin, operator, nobody):
    refund = Tool.objects.get(name="refund_order")
    with acting_as(acme_admin), pytest.raises(ControlChangeRequired) as attempt:
        assign_perm("tools.approve_tool", acme_admin2, refund)
    from agentplatform.controlplane.services import control_changes_propose

    [for_admin2] = control_changes_propose(proposer=acme_admin, gated=attempt.value.gated)
    with pytest.raises(ControlChangeForbidden):  # the person it empowers
        control_change_approve(change_id=for_admin2.pk, approver=acme_admin2)
    with pytest.raises(ControlChangeNotFound):  # another tenant's administrator
        control_change_approve(change_id=for_admin2.pk, approver=globex_admin)
    with pytest.raises(ControlChangeNotFound):  # not an administrator at all
        control_change_approve(change_id=for_admin2.pk, approver=nobody)
    # a tenant whose other administrator cannot decide needs the operator
    control_change_approve(change_id=for_admin2.pk, approver=operator)
    assert User.objects.get(pk=acme_admin2.pk).has_perm("tools.approve_tool", refund)
    source = StandingSource.objects.get(kind="USER_GRANT", user=acme_admin2, tool=refund)
    assert (source.proposer_id, source.approver_id) == (acme_admin.pk, operator.pk)
    with pytest.raises(ControlChangeAlreadyDecided):
        control_change_approve(change_id=for_admin2.pk, approver=operator)
    denied = [r for r in AuditEvent.objects.filter(decision=AuditEvent.Decision.CONTROL_CHANGE, status="DENIED")]
    assert {r.actor_id for r in denied} >= {acme_admin2.pk}


def _propose_grant(admin: User, user: User, tool_name: str = "refund_order") -> PendingControlChange:
    from agentplatform.controlplane.services import control_changes_propose

    with acting_as(admin), pytest.raises(ControlChangeRequired) as attempt:
        assign_perm("tools.approve_tool", user, Tool.objects.get(name=tool_name))
    [change] = control_changes_propose(proposer=admin, gated=attempt.value.gated)
    return change


def test_a_change_is_revalidated_when_approved(acme_admin, acme_admin2, nobody):
    change = _propose_grant(acme_admin, nobody)
    User.objects.filter(pk=nobody.pk).update(tenant=Tenant.objects.get(slug="globex"))  # moved meanwhile
    with pytest.raises(ControlChangeStale):
        control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert PendingControlChange.objects.get(pk=change.pk).status == Status.REFUSED
    assert not User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", Tool.objects.get(name="refund_order"))
    assert _trail(change) == ["PROPOSED", "REFUSED", "DENIED"]


def test_undecided_changes_expire_and_rejections_are_audited(settings, acme_admin, acme_admin2, nobody, approver1):
    settings.CONTROL_CHANGE_TTL_HOURS = 1
    change = _propose_grant(acme_admin, nobody)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)
    with mock.patch("core.clock.now", return_value=later):
        assert control_changes_expire() == 1
    assert PendingControlChange.objects.get(pk=change.pk).status == Status.EXPIRED
    with pytest.raises(ControlChangeAlreadyDecided):
        control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert _trail(change)[:2] == ["PROPOSED", "EXPIRED"]

    again = _propose_grant(acme_admin, approver1, "query_inventory")
    control_change_reject(change_id=again.pk, decider=acme_admin2, reason="not an approver of stock questions")
    assert PendingControlChange.objects.get(pk=again.pk).status == Status.REJECTED
    assert _trail(again) == ["PROPOSED", "REJECTED"]


@pytest.mark.postgres
def test_two_administrators_approving_at_once_apply_it_once(transactional_db, people, operator):
    acme_admin, acme_admin2, nobody = (people["acme"][k] for k in ("admin", "admin2", "nobody"))
    change = _propose_grant(acme_admin, nobody)
    deciders = [acme_admin2, operator] * 3

    results = race(len(deciders), lambda i: User.objects.get(pk=deciders[i].pk),
                   lambda user: control_change_approve(change_id=uuid.UUID(str(change.pk)), approver=user))

    applied = [r for r in results if isinstance(r, PendingControlChange)]
    assert len(applied) == 1, results
    assert all(isinstance(r, ControlChangeAlreadyDecided) for r in results if r not in applied), results
    assert _trail(change).count("APPLIED") == 1
    from guardian.models import UserObjectPermission

    assert UserObjectPermission.objects.filter(user=nobody, permission__codename="approve_tool").count() == 1


def test_admin_forms_turn_a_reactivation_and_a_group_grant_into_proposals(client, acme_admin, acme_admin2, approver1):
    from tests.controlplane.test_tenant_admin_scope import _user_form

    User.objects.filter(pk=approver1.pk).update(is_active=False)  # deactivated earlier (tightening)
    approver1 = User.objects.get(pk=approver1.pk)
    client.force_login(acme_admin)
    response = client.post(admin_url(User, "change", approver1.pk), _user_form(approver1, is_active="on"))
    assert response.status_code == 302 and response.url == admin_url(PendingControlChange, "changelist")
    assert not User.objects.get(pk=approver1.pk).is_active
    reactivation = PendingControlChange.objects.get(kind="REACTIVATION", status=Status.PENDING)

    approvers = Group.objects.get(name="acme-approvers")
    inventory = Tool.objects.get(name="query_inventory")
    page = reverse("admin:tools_tool_permissions_manage_group", args=[inventory.pk, approvers.pk])
    assert client.post(page, {"permissions": ["approve_tool"]}).status_code == 302
    grant = PendingControlChange.objects.get(kind="GROUP_GRANT", status=Status.PENDING)
    assert grant.new_state["members"] == ["acme-approver1", "acme-approver2"]  # who it empowers, shown

    _approve_in_admin(client, acme_admin2, [reactivation, grant])
    assert User.objects.get(pk=approver1.pk).is_active
    assert User.objects.get(pk=approver1.pk).has_perm("tools.approve_tool", inventory)
    source = StandingSource.objects.get(kind="ACTIVATION", user=approver1)
    assert (source.proposer_id, source.approver_id) == (acme_admin.pk, acme_admin2.pk)
