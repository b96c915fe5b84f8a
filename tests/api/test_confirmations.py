"""The requester's confirmation endpoints: confirm / cancel by token, fresh token by id."""
from __future__ import annotations

import datetime
import uuid

from core import clock
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tools.catalog.models import Cancellation, Order
from tests.api.conftest import CANCEL_ORDER, assert_error


def order_status(user) -> str:
    return Order.objects.get(tenant=user.tenant, order_id=CANCEL_ORDER).status


def test_confirm_resumes_the_run_and_cancels_once(api, requester, cancel_pending, django_capture_on_commit_callbacks):
    client = api(requester)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/confirmations/confirm/", {"token": cancel_pending.pending[0].token},
                               format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == cancel_pending.pending[0].confirmation_id and body["tool"] == "cancel_order"
    assert body["run_id"] == str(cancel_pending.run.pk)
    assert body["status"] == "CONFIRMED"  # the resume runs after the commit (here: as the block exits)
    assert "token" not in body and "arguments" not in body
    assert Run.objects.get(pk=cancel_pending.run.pk).status == Run.Status.COMPLETED
    assert ConfirmationRequest.objects.get(pk=body["id"]).status == "CONSUMED"
    assert order_status(requester) == Order.Status.CANCELLED and Cancellation.objects.count() == 1
    # a second decision with the same token
    again = client.post("/api/v1/confirmations/confirm/", {"token": cancel_pending.pending[0].token}, format="json")
    assert_error(again, 409, "ALREADY_DECIDED")
    assert Cancellation.objects.count() == 1


def test_cancel_tells_the_model_it_was_rejected(api, requester, cancel_pending, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api(requester).post("/api/v1/confirmations/cancel/", {"token": cancel_pending.pending[0].token},
                                       format="json")
    assert response.status_code == 200 and response.json()["status"] == "CANCELLED"
    run = Run.objects.get(pk=cancel_pending.run.pk)
    assert run.status == Run.Status.COMPLETED
    assert order_status(requester) == Order.Status.PAID
    assert any('"REJECTED"' in m["content"] for m in run.state["messages"] if m["role"] == "tool")


def test_confirm_validation(api, requester):
    client = api(requester)
    assert_error(client.post("/api/v1/confirmations/confirm/", {}, format="json"), 400, "INVALID_ARGUMENTS")
    assert_error(client.post("/api/v1/confirmations/confirm/", {"token": 12345}, format="json"), 400,
                 "INVALID_ARGUMENTS")
    assert_error(client.post("/api/v1/confirmations/cancel/", {"token": None}, format="json"), 400,
                 "INVALID_ARGUMENTS")


def test_unknown_or_foreign_tokens_are_404(api, requester, approver1, outsider, cancel_pending):
    token = cancel_pending.pending[0].token
    assert_error(api(requester).post("/api/v1/confirmations/confirm/", {"token": "ct_nope"}, format="json"),
                 404, "CONFIRMATION_INVALID")
    for other in (approver1, outsider):
        assert_error(api(other).post("/api/v1/confirmations/confirm/", {"token": token}, format="json"),
                     404, "CONFIRMATION_INVALID")
        assert_error(api(other).post("/api/v1/confirmations/cancel/", {"token": token}, format="json"),
                     404, "CONFIRMATION_INVALID")
    assert ConfirmationRequest.objects.get(pk=cancel_pending.pending[0].confirmation_id).status == "PENDING"


def test_an_expired_confirmation_is_410(api, requester, cancel_pending, monkeypatch):
    later = clock.now() + datetime.timedelta(hours=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    response = api(requester).post("/api/v1/confirmations/confirm/", {"token": cancel_pending.pending[0].token},
                                   format="json")
    assert_error(response, 410, "CONFIRMATION_EXPIRED")
    assert ConfirmationRequest.objects.get(pk=cancel_pending.pending[0].confirmation_id).status == "EXPIRED"
    assert order_status(requester) == Order.Status.PAID


def test_fresh_token_replaces_the_old_one(api, requester, cancel_pending, django_capture_on_commit_callbacks):
    client = api(requester)
    request_id = cancel_pending.pending[0].confirmation_id
    response = client.post(f"/api/v1/confirmations/{request_id}/token/")
    assert response.status_code == 200
    body = response.json()
    assert body["confirmation_id"] == request_id and body["token"].startswith("ct_")
    assert body["token"] != cancel_pending.pending[0].token
    # the old token is void, the new one confirms
    assert_error(client.post("/api/v1/confirmations/confirm/", {"token": cancel_pending.pending[0].token},
                             format="json"), 404, "CONFIRMATION_INVALID")
    with django_capture_on_commit_callbacks(execute=True):
        confirmed = client.post("/api/v1/confirmations/confirm/", {"token": body["token"]}, format="json")
    assert confirmed.status_code == 200 and order_status(requester) == Order.Status.CANCELLED
    # a decided request gets no new token
    assert_error(client.post(f"/api/v1/confirmations/{request_id}/token/"), 409, "ALREADY_DECIDED")


def test_fresh_token_is_only_for_my_own_requester_confirmed_calls(api, requester, approver1, outsider,
                                                                  cancel_pending, refund_pending):
    mine = cancel_pending.pending[0].confirmation_id
    for other in (approver1, outsider):
        assert_error(api(other).post(f"/api/v1/confirmations/{mine}/token/"), 404, "CONFIRMATION_INVALID")
    approver_gated = refund_pending.pending[0].confirmation_id
    assert_error(api(requester).post(f"/api/v1/confirmations/{approver_gated}/token/"), 404, "CONFIRMATION_INVALID")
    assert_error(api(requester).post(f"/api/v1/confirmations/{uuid.uuid4()}/token/"), 404, "CONFIRMATION_INVALID")


def test_fresh_token_for_an_expired_request_is_410(api, requester, cancel_pending, monkeypatch):
    later = clock.now() + datetime.timedelta(hours=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    response = api(requester).post(f"/api/v1/confirmations/{cancel_pending.pending[0].confirmation_id}/token/")
    assert_error(response, 410, "CONFIRMATION_EXPIRED")
