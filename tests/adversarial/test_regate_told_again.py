"""A regate, attacked with what follows it: a second regate (the quorum raised twice), and a
regate followed by expiry, read by a requester who was not watching (after a reload: the stored
events, the run API, My requests). Each time the requester reads the state the call is in now,
never the earlier one."""
from __future__ import annotations

import datetime

from django.utils import timezone

from agentplatform.runtime.models import Run
from agentplatform.tenancy.models import User
from approvals.models import ConfirmationRequest
from approvals.expiry import confirmations_expire
from tests.approvals.test_regate_told import _api, _last_wait, _refund, _told
from tools.catalog.models import Refund
from tools.models import Tool


def test_a_second_regate_tells_the_latest_state(requester, approver1, approver2, people,
                                               django_capture_on_commit_callbacks):
    approver3 = User.objects.create_user(username="acme-approver3", password="x", tenant=requester.tenant)
    approver3.groups.add(*approver1.groups.all())
    run, request_id = _refund(requester)
    _api(approver1).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    Tool.objects.filter(name="refund_order").update(quorum=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert _api(approver2).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json").status_code == 200
    Tool.objects.filter(name="refund_order").update(quorum=4)
    with django_capture_on_commit_callbacks(execute=True):
        response = _api(approver3).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    assert response.status_code == 200, response.content

    told = _told(requester, run.pk)
    assert not Refund.objects.exists()
    wait = _last_wait(told["events"])
    assert (wait["regated"]["quorum"], wait["regated"]["approvals"]) == (4, 3), wait["regated"]
    assert "needs 4 approvers and 3 of them count" in wait["regated"]["message"]
    assert [(p["needs"], p["quorum"], p["approvals"]) for p in told["run"]["pending"]] == [("approvers", 4, 3)]
    mine = told["mine"][0]
    assert mine["status"] == "PENDING" and "needs 4 approvers" in mine["regated"]["message"]


def test_a_regate_then_expiry_says_expired(requester, approver1, approver2, django_capture_on_commit_callbacks):
    run, request_id = _refund(requester)
    _api(approver1).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    Tool.objects.filter(name="refund_order").update(quorum=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert _api(approver2).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json").status_code == 200
    ConfirmationRequest.objects.filter(pk=request_id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        confirmations_expire(request_ids=[request_id])

    told = _told(requester, run.pk)
    assert not Refund.objects.exists()
    mine = told["mine"][0]
    assert mine["status"] == "EXPIRED", mine
    assert told["run"]["pending"] == [] or all(p.get("status") != "PENDING" for p in told["run"]["pending"])
    types = [e["type"] for e in told["events"]]
    last_wait = max(i for i, t in enumerate(types) if t == "CONFIRMATION_REQUIRED")
    after = [e for e in told["events"][last_wait + 1:]]
    assert any("EXPIRED" in str(e["payload"]) or "expire" in str(e["payload"]).lower() for e in after), types
    assert Run.objects.get(pk=run.pk).status != Run.Status.AWAITING_CONFIRMATION
