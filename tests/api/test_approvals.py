"""The approvers' endpoints: list, approve, reject; roles, tenants, expiry and second decisions."""
from __future__ import annotations

import datetime
import uuid

import pytest

from django.contrib.auth.models import Permission

from core import clock
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tools.catalog.models import Order, Refund
from tests.api.conftest import REFUND_ORDER, assert_error


def approve(client, request_id, **body):
    return client.post(f"/api/v1/approvals/{request_id}/approve/", body, format="json")


def reject(client, request_id, **body):
    return client.post(f"/api/v1/approvals/{request_id}/reject/", body, format="json")


def test_pending_list_shows_what_an_approver_may_decide(api, requester, approver1, refund_pending):
    response = api(approver1).get("/api/v1/approvals/")
    assert response.status_code == 200
    page = response.json()
    assert page["count"] == 1
    [item] = page["results"]
    assert item["id"] == refund_pending.pending[0].confirmation_id
    assert (item["tool"], item["risk"], item["requester"], item["status"]) == \
        ("refund_order", "CRITICAL", requester.username, "PENDING")
    assert (item["approvals"], item["quorum"], item["decided_by_me"]) == (0, 2, False)
    assert item["masked_arguments"]["order_id"] == REFUND_ORDER
    assert REFUND_ORDER in item["summary"] and "damaged" in item["context_excerpt"]


def test_the_pending_list_is_newest_first(api, requester, approver1, refund_pending):
    later = services.chat_send(user=requester, message="Refund order A202607290004 because it was wrong").pending[0]
    ids = [r["id"] for r in api(approver1).get("/api/v1/approvals/?status=PENDING").json()["results"]]
    assert ids == [later.confirmation_id, refund_pending.pending[0].confirmation_id]


def test_own_requests_other_tenants_and_non_approvers_see_nothing(api, requester, nobody, outsider_approver,
                                                                  refund_pending):
    for user in (requester, nobody, outsider_approver):
        assert api(user).get("/api/v1/approvals/").json()["count"] == 0


def test_two_approvals_reach_quorum_and_the_refund_runs_once(api, approver1, approver2, refund_pending,
                                                             django_capture_on_commit_callbacks):
    request_id = refund_pending.pending[0].confirmation_id
    # first approval: 1 of 2, nothing runs
    first = approve(api(approver1), request_id, comment="photos checked")
    assert first.status_code == 200
    assert (first.json()["approvals"], first.json()["status"], first.json()["decided_by_me"]) == (1, "PENDING", True)
    assert Refund.objects.count() == 0
    assert api(approver1).get("/api/v1/approvals/").json()["count"] == 0  # decided by me: in history now
    assert api(approver1).get("/api/v1/approvals/?status=history").json()["results"][0]["id"] == request_id
    # second approval: quorum, the run resumes after the commit
    with django_capture_on_commit_callbacks(execute=True):
        second = approve(api(approver2), request_id)
    assert second.status_code == 200
    body = second.json()
    assert body["approvals"] == 2 and body["status"] == "CONFIRMED"  # the resume ran after the commit
    assert [d["approver"] for d in body["decisions"]] == [approver1.username, approver2.username]
    assert body["decisions"][0]["comment"] == "photos checked"
    assert Refund.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=request_id).status == "CONSUMED"
    assert Run.objects.get(pk=refund_pending.run.pk).status == Run.Status.COMPLETED


@pytest.fixture
def admin_as_approver(acme_admin, approver1):
    """acme_admin made a third approver before the request exists (shell: no second person needed)."""
    acme_admin.groups.add(*approver1.groups.all())  # a tenant administrator holds no grant itself
    return acme_admin


def test_a_second_decision_is_409(api, approver1, approver2, admin_as_approver, refund_pending):
    request_id = refund_pending.pending[0].confirmation_id
    acme_admin = admin_as_approver
    assert approve(api(approver1), request_id).status_code == 200
    assert_error(approve(api(approver1), request_id), 409, "ALREADY_DECIDED")  # same approver again
    assert reject(api(approver2), request_id, reason="no").status_code == 200
    assert_error(approve(api(acme_admin), request_id), 409, "ALREADY_DECIDED")  # decided by someone else
    assert_error(reject(api(acme_admin), request_id, reason="late"), 409, "ALREADY_DECIDED")


def test_reject_needs_a_reason_and_cancels(api, approver1, refund_pending, django_capture_on_commit_callbacks):
    request_id = refund_pending.pending[0].confirmation_id
    assert_error(reject(api(approver1), request_id), 400, "INVALID_ARGUMENTS")
    assert_error(reject(api(approver1), request_id, reason=""), 400, "INVALID_ARGUMENTS")
    assert_error(reject(api(approver1), request_id, reason=3), 400, "INVALID_ARGUMENTS")
    assert_error(reject(api(approver1), request_id, reason="   "), 400, "INVALID_ARGUMENTS")
    with django_capture_on_commit_callbacks(execute=True):
        response = reject(api(approver1), request_id, reason="the photos show no damage")
    assert response.status_code == 200 and response.json()["status"] == "CANCELLED"
    assert response.json()["decisions"][0]["comment"] == "the photos show no damage"
    assert Refund.objects.count() == 0
    assert Order.objects.get(order_id=REFUND_ORDER).status == Order.Status.PAID
    assert Run.objects.get(pk=refund_pending.run.pk).status == Run.Status.COMPLETED


def test_approve_validation(api, approver1, refund_pending):
    request_id = refund_pending.pending[0].confirmation_id
    assert_error(approve(api(approver1), request_id, comment=["x"]), 400, "INVALID_ARGUMENTS")
    assert_error(approve(api(approver1), request_id, comment="x" * 2001), 400, "INVALID_ARGUMENTS")
    assert_error(api(approver1).get("/api/v1/approvals/?status=DONE"), 400, "INVALID_ARGUMENTS")


def test_wrong_role_is_403(api, requester, nobody, refund_pending):
    request_id = refund_pending.pending[0].confirmation_id
    assert_error(approve(api(requester), request_id), 403, "APPROVAL_FORBIDDEN")  # own request
    assert_error(approve(api(nobody), request_id), 403, "APPROVAL_FORBIDDEN")  # no approve_tool
    assert_error(reject(api(nobody), request_id, reason="no"), 403, "APPROVAL_FORBIDDEN")
    assert ConfirmationRequest.objects.get(pk=request_id).approvals.count() == 0


def test_a_requester_confirmed_call_is_not_for_approvers(api, approver1, cancel_pending):
    assert_error(approve(api(approver1), cancel_pending.pending[0].confirmation_id), 403, "APPROVAL_FORBIDDEN")


def test_wrong_tenant_and_unknown_ids_are_404(api, outsider_approver, approver1, refund_pending):
    request_id = refund_pending.pending[0].confirmation_id
    assert_error(approve(api(outsider_approver), request_id), 404, "CONFIRMATION_INVALID")
    assert_error(reject(api(outsider_approver), request_id, reason="no"), 404, "CONFIRMATION_INVALID")
    assert_error(approve(api(approver1), uuid.uuid4()), 404, "CONFIRMATION_INVALID")


def test_a_decision_after_expiry_is_410(api, approver1, refund_pending, monkeypatch):
    request_id = refund_pending.pending[0].confirmation_id
    later = clock.now() + datetime.timedelta(days=2)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert api(approver1).get("/api/v1/approvals/").json()["count"] == 0
    history = api(approver1).get("/api/v1/approvals/?status=history").json()["results"]
    assert [(h["id"], h["status"]) for h in history] == [(request_id, "EXPIRED")]
    assert_error(approve(api(approver1), request_id), 410, "CONFIRMATION_EXPIRED")
    assert ConfirmationRequest.objects.get(pk=request_id).status == "EXPIRED"


def test_a_global_approve_permission_is_not_enough(api, nobody, refund_pending):
    # guardian object permissions only: a model-wide grant does not make an approver
    nobody.user_permissions.add(Permission.objects.get(codename="approve_tool"))
    assert api(nobody).get("/api/v1/approvals/").json()["count"] == 0
    assert_error(approve(api(nobody), refund_pending.pending[0].confirmation_id), 403, "APPROVAL_FORBIDDEN")
