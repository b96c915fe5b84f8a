"""Moving a user to another tenant ends the old tenant's authority in one audited transaction
(docs/roles.md, "Moving a user to another tenant"): object grants, group memberships, direct
permissions and staff status go, API keys are revoked, web sessions end, open requests they made
and their unfinished runs are cancelled; whoever saves the change (the operator's admin form or
any `save()`)."""
from __future__ import annotations

from unittest import mock

import pytest
from django.db import transaction
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from agentplatform.api.models import ApiKey
from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.runtime import services as runtime
from agentplatform.runtime.models import Run
from agentplatform.controlplane.errors import ControlChangeRequired
from agentplatform.controlplane.services import control_change_approve, control_change_propose
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import User
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.controlplane.conftest import admin_url
from tools.models import Tool

ACME_REFUND = "A202607290003"
GLOBEX_REFUND = "A202607300003"


def _key_client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def _operator_moves(client, operator, user: User, tenant_id: int):
    """The operator's change form of `user`, posted with the new tenant and the form's other values
    as they stand (its groups, permissions and staff box: the old tenant's)."""
    client.force_login(operator)
    form = {"username": user.username, "email": user.email, "is_active": "on", "tenant": str(tenant_id),
            "is_staff": "on" if user.is_staff else "",
            "groups": [g.pk for g in user.groups.all()],
            "user_permissions": [p.pk for p in user.user_permissions.all()],
            "last_login_0": "", "last_login_1": "", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"}
    return client.post(admin_url(User, "change", user.pk), {k: v for k, v in form.items() if v != ""})


@pytest.fixture
def empowered(people, acme_admin):
    """acme's requester, also made an approver of refund_order by acme's administrator (directly,
    and through acme's approvers group), with a key, a web session and an open refund request."""
    from django.contrib.auth.models import Group

    user = people["acme"]["requester"]
    # proposed by acme's administrator, approved by its second one (a person alone only proposes)
    for attempt in (lambda: assign_perm("tools.approve_tool", user, Tool.objects.get(name="refund_order")),
                    lambda: user.groups.add(Group.objects.get(name="acme-approvers"))):
        with acting_as(acme_admin), pytest.raises(ControlChangeRequired) as refused, transaction.atomic():
            attempt()
        change = control_change_propose(proposer=acme_admin, gated=refused.value.gated[0])
        control_change_approve(change_id=change.pk, approver=people["acme"]["admin2"])
    raw = api_token_issue(user=user)
    outcome = runtime.chat_send(user=user, message=f"Refund order {ACME_REFUND} because it arrived damaged")
    assert outcome.pending and outcome.pending[0].needs == "approvers"
    return user, raw, outcome


def test_a_moved_approver_cannot_approve_in_the_new_tenant_and_everything_is_in_the_trail(
        client, operator, people, empowered, outsider):
    user, raw, outcome = empowered
    web = client.__class__()
    web.force_login(user)
    assert web.get("/chat/").status_code == 200
    globex = outsider.tenant
    before = set(AuditEvent.objects.values_list("pk", flat=True))

    # when: the operator moves them to globex in the admin (the form still lists acme's groups)
    response = _operator_moves(client, operator, user, globex.pk)

    # then
    assert response.status_code == 302, response.content.decode()[:2000]
    moved = User.objects.get(pk=user.pk)
    assert moved.tenant_id == globex.pk and not moved.is_staff
    assert not moved.groups.exists() and not moved.user_permissions.exists()
    assert not UserObjectPermission.objects.filter(user=moved).exists()
    assert not ApiKey.objects.filter(user=moved).exists()
    assert web.get("/chat/").status_code == 302  # the old session ended
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert (request.status, request.outcome_code) == ("CANCELLED", "RUN_ENDED")
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.CANCELLED

    # a globex refund: neither the old key nor a new session may approve it
    refund = runtime.chat_send(user=outsider, message=f"Refund order {GLOBEX_REFUND} because it arrived damaged")
    request_id = refund.pending[0].confirmation_id
    assert _key_client(raw).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json").status_code == 401
    fresh = APIClient()
    fresh.force_login(moved)
    denied = fresh.post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    assert denied.status_code in (403, 404) and not ConfirmationRequest.objects.get(pk=request_id).approvals.exists()

    # every step is in the trail, in both tenants where it concerns both
    rows = list(AuditEvent.objects.exclude(pk__in=before))
    kinds = {((r.masked_arguments or {}).get("object") or {}).get("type"): r for r in rows
             if r.decision == "CONTROL_CHANGE"}
    for kind in ("user", "object_permission", "membership", "api_token", "tenant_move"):
        assert kind in kinds, (kind, [r.message for r in rows])
    moves = [r for r in rows if ((r.masked_arguments or {}).get("object") or {}).get("type") == "tenant_move"]
    assert {r.tenant_id for r in moves} == {people["acme"]["admin"].tenant_id, globex.pk}
    assert all(r.actor_id == operator.pk for r in moves)
    assert moves[0].masked_arguments["removed"] == {"object_grants": 5, "groups": 1, "permissions": 4}  # use_tool x4, approve_tool
    assert any(r.decision == "CANCELLED" and str(r.confirmation_id) == str(request.pk) for r in rows)
    assert any(r.decision == "CANCELLED" and r.status == "RUN_CANCELLED" for r in rows)
    assert raw not in str([r.masked_arguments for r in rows]) + str([r.message for r in rows])


def test_any_save_that_changes_the_tenant_cleans_up_and_cancels_requests_without_a_run(empowered, outsider):
    user, raw, outcome = empowered
    # a request whose run already ended is cancelled through the requester rule
    Run.objects.filter(pk=outcome.run.pk).update(status=Run.Status.COMPLETED)
    user.tenant = outsider.tenant
    user.save()
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert (request.status, request.outcome_code) == ("CANCELLED", "REQUESTER_MOVED")
    assert not ApiKey.objects.filter(user=user).exists()
    assert not user.has_perm("tools.approve_tool", Tool.objects.get(name="refund_order"))
    assert _key_client(raw).get("/api/v1/tools/").status_code == 401


def test_a_tenant_administrator_moved_away_is_no_longer_staff(acme_admin, outsider):
    acme_admin.tenant = outsider.tenant
    acme_admin.save(update_fields=["tenant"])
    assert User.objects.get(pk=acme_admin.pk).is_staff is False


def test_the_move_and_its_clean_up_commit_or_fail_together(empowered, outsider):
    user, raw, _ = empowered
    acme_id = user.tenant_id
    with mock.patch("agentplatform.runtime.services.runs_cancel_for_moved_user", side_effect=RuntimeError("down")):
        with pytest.raises(RuntimeError), transaction.atomic():
            user.tenant = outsider.tenant
            user.save()
    fresh = User.objects.get(pk=user.pk)
    assert fresh.tenant_id == acme_id and fresh.groups.exists()
    assert ApiKey.objects.filter(user=fresh).exists()
    assert _key_client(raw).get("/api/v1/tools/").status_code == 200


def test_a_save_that_keeps_the_tenant_touches_nothing(empowered):
    user, raw, outcome = empowered
    user.first_name = "Renamed"
    user.save()
    assert ApiKey.objects.filter(user=user).exists() and user.groups.exists()
    assert ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id).status == "PENDING"
