"""An insider with admin rights tries to *empower* an approver without a second person, or to make
a decision count that should not: global permissions instead of object grants, superuser
shortcuts, groups, provenance resets, and the decisions on pending control changes themselves."""
from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from guardian.shortcuts import assign_perm, remove_perm
from rest_framework.test import APIClient

from core import clock
from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.controlplane.errors import (
    ControlChangeAlreadyDecided,
    ControlChangeExpired,
    ControlChangeRequired,
    ControlChangeStale,
)
from agentplatform.controlplane.guards.gate import Gated
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.services import control_change_approve, control_change_propose, control_change_reject
from agentplatform.runtime import services as runtime
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import TenantGroup, User
from approvals import approver_actions
from approvals.errors import ApprovalForbidden, ApproverNotIndependent
from tests.controlplane.conftest import admin_url
from tools.models import Tool

Status = PendingControlChange.Status
REFUND_ORDER = "A202607290003"


def _refund_request(user) -> str:
    outcome = runtime.chat_send(user=user, message=f"refund {REFUND_ORDER} amount 500 because damaged")
    return outcome.pending[0].confirmation_id


def _gated(exc_info) -> Gated:
    return exc_info.value.gated[0]


def _propose(proposer, attempt) -> PendingControlChange:
    with acting_as(proposer), pytest.raises(ControlChangeRequired) as refused, transaction.atomic():
        attempt()
    return control_change_propose(proposer=proposer, gated=_gated(refused))


def test_a_global_approve_tool_permission_makes_nobody_an_approver(requester, nobody):
    # given: a global tools.approve_tool (user permissions and a group's), at a shell
    approve = Permission.objects.get(codename="approve_tool", content_type__app_label="tools")
    nobody.user_permissions.add(approve)
    group = Group.objects.create(name="acme-global-approvers")
    TenantGroup.objects.create(group=group, tenant=nobody.tenant)
    group.permissions.add(approve)
    nobody.groups.add(group)
    request_id = _refund_request(requester)
    # then: it is no standing on a tool
    with pytest.raises(ApprovalForbidden):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=nobody.pk))


def test_a_superuser_with_a_tenant_is_no_approver(requester, operator):
    request_id = _refund_request(requester)
    operator.tenant = requester.tenant
    operator.save()
    with pytest.raises((ApprovalForbidden, ApproverNotIndependent)):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=operator.pk))


def test_an_operators_proposal_approved_by_the_requester_never_counts_for_them(acme_admin, operator, nobody):
    refund = Tool.objects.get(name="refund_order")
    change = _propose(operator, lambda: assign_perm("tools.approve_tool", nobody, refund))
    control_change_approve(change_id=change.pk, approver=acme_admin)
    assign_perm("tools.use_tool", acme_admin, refund)  # shell: acme-admin may ask for refunds
    request_id = _refund_request(acme_admin)
    with pytest.raises(ApproverNotIndependent):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=nobody.pk))


def test_group_paths_need_a_second_person(acme_admin, nobody):
    refund = Tool.objects.get(name="refund_order")
    approvers = Group.objects.get(name="acme-approvers")
    with acting_as(acme_admin):
        fresh = Group.objects.create(name="acme-fresh")
        TenantGroup.objects.create(group=fresh, tenant=acme_admin.tenant)
        fresh.user_set.add(nobody)  # no approve_tool yet: immediate
        attempts = [
            lambda: assign_perm("tools.approve_tool", fresh, refund),             # new group gains it
            lambda: approvers.user_set.add(nobody),                               # from the group's side
            lambda: nobody.groups.set([fresh, approvers]),                        # set() adds too
            lambda: assign_perm("tools.approve_tool", fresh, Tool.objects.create(name="later_tool", source="x")),
        ]
        for attempt in attempts:
            with pytest.raises(ControlChangeRequired), transaction.atomic():
                attempt()
    assert not User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", refund)


def test_remove_and_add_again_is_a_new_proposal_and_a_new_since(acme_admin, acme_admin2, approver1, requester):
    approvers = Group.objects.get(name="acme-approvers")
    request_id = _refund_request(requester)
    with acting_as(acme_admin):
        approvers.user_set.remove(approver1)  # tightening: immediate
    change = _propose(acme_admin, lambda: approvers.user_set.add(approver1))
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    # standing began again after the request: it does not count for it
    with pytest.raises(ApproverNotIndependent):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=approver1.pk))


def test_a_grant_approved_while_a_request_is_pending_does_not_count_for_it(acme_admin, acme_admin2, nobody,
                                                                          requester):
    refund = Tool.objects.get(name="refund_order")
    change = _propose(acme_admin, lambda: assign_perm("tools.approve_tool", nobody, refund))
    request_id = _refund_request(requester)
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    with pytest.raises(ApproverNotIndependent):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=nobody.pk))


def test_revoke_and_grant_again_resets_since(acme_admin, acme_admin2, approver1, requester):
    refund = Tool.objects.get(name="refund_order")
    change = _propose(acme_admin, lambda: assign_perm("tools.approve_tool", approver1, refund))
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    approvers = Group.objects.get(name="acme-approvers")
    with acting_as(acme_admin):
        approvers.user_set.remove(approver1)
    request_id = _refund_request(requester)
    with acting_as(acme_admin):
        remove_perm("tools.approve_tool", approver1, refund)
    again = _propose(acme_admin, lambda: assign_perm("tools.approve_tool", approver1, refund))
    control_change_approve(change_id=again.pk, approver=acme_admin2)
    with pytest.raises(ApproverNotIndependent):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=approver1.pk))


def test_moving_an_approver_away_and_back_leaves_no_standing(people, operator, approver1, requester):
    request_id = _refund_request(requester)
    with acting_as(operator):
        moved = User.objects.get(pk=approver1.pk)
        moved.tenant = people["globex"]["admin"].tenant
        moved.save()
        moved.tenant = requester.tenant
        moved.save()
    with pytest.raises(ApprovalForbidden):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=approver1.pk))


def test_decisions_on_control_changes(settings, acme_admin, acme_admin2, globex_admin, nobody, approver1):
    refund = Tool.objects.get(name="refund_order")
    # an expired one
    change = _propose(acme_admin, lambda: assign_perm("tools.approve_tool", nobody, refund))
    PendingControlChange.objects.filter(pk=change.pk).update(expires_at=clock.now() - datetime.timedelta(seconds=1))
    with pytest.raises(ControlChangeExpired):
        control_change_approve(change_id=change.pk, approver=acme_admin2)
    # one whose target moved away
    change = _propose(acme_admin, lambda: assign_perm("tools.approve_tool", nobody, refund))
    User.objects.filter(pk=nobody.pk).update(tenant=globex_admin.tenant)
    with pytest.raises(ControlChangeStale):
        control_change_approve(change_id=change.pk, approver=acme_admin2)
    User.objects.filter(pk=nobody.pk).update(tenant=acme_admin.tenant)
    # rejected, then approved
    change = _propose(acme_admin, lambda: assign_perm("tools.approve_tool", nobody, refund))
    control_change_reject(change_id=change.pk, decider=acme_admin, reason="withdrawn")
    with pytest.raises(ControlChangeAlreadyDecided):
        control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert not User.objects.get(pk=nobody.pk).has_perm("tools.approve_tool", refund)


def test_another_tenants_change_id_posted_to_the_admin_action_is_not_found(client, acme_admin, globex_admin, people):
    globex_nobody = people["globex"]["nobody"]
    refund = Tool.objects.get(name="refund_order")
    change = _propose(globex_admin, lambda: assign_perm("tools.approve_tool", globex_nobody, refund))
    client.force_login(acme_admin)
    client.post(admin_url(PendingControlChange, "changelist"),
                {"action": "approve_changes", "_selected_action": [str(change.pk)]})
    assert PendingControlChange.objects.get(pk=change.pk).status == Status.PENDING
    assert client.get(admin_url(PendingControlChange, "change", change.pk)).status_code == 404


def test_a_key_stops_with_deactivation(acme_admin, approver1, requester):
    key = api_token_issue(user=approver1)
    request_id = _refund_request(requester)
    with acting_as(acme_admin):
        approver1.is_active = False
        approver1.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json").status_code == 401


def test_a_service_account_is_never_made_staff(acme_admin, people):
    integration = people["acme"]["integration"]
    with acting_as(acme_admin), pytest.raises(Exception):
        integration.is_staff = True
        integration.save()
    assert not User.objects.get(pk=integration.pk).is_staff
