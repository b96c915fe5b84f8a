"""POST /api/v1/chat/: answers, waiting for confirmations, confirmation tokens, refusals."""
from __future__ import annotations

import json

from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tools.catalog.models import Cancellation, Order, StockLevel
from tests.api.conftest import CANCEL_ORDER, REFUND_ORDER, assert_error


def test_chat_answers_from_the_database(api, requester):
    StockLevel.objects.filter(tenant=requester.tenant, sku="SKU-10001", warehouse_code="WH-HZ-01").update(
        available_quantity=4321)
    response = api(requester).post("/api/v1/chat/", {"message": "How many SKU-10001 in WH-HZ-01?"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "COMPLETED" and "4321" in body["answer"]
    assert body["pending"] == [] and body["error"] is None
    run = Run.objects.get(pk=body["run_id"])
    assert str(run.conversation_id) == body["conversation_id"] and run.user == requester


def test_chat_continues_a_conversation(api, requester):
    client = api(requester)
    first = client.post("/api/v1/chat/", {"message": "How many SKU-10001 in WH-HZ-01?"}, format="json").json()
    second = client.post("/api/v1/chat/", {"message": "And SKU-20001?", "conversation_id": first["conversation_id"]},
                         format="json").json()
    assert second["conversation_id"] == first["conversation_id"] and second["run_id"] != first["run_id"]


def test_gated_call_returns_pending_with_a_token_then_the_token_resumes(api, requester):
    client = api(requester)
    # when: the requester asks for a HIGH-risk cancellation
    body = client.post("/api/v1/chat/", {"message": f"Please cancel order {CANCEL_ORDER} because it is late"},
                       format="json").json()
    # then: it waits for them, with a token shown once
    assert body["status"] == "AWAITING_CONFIRMATION" and body["answer"] is None
    [pending] = body["pending"]
    assert pending["tool"] == "cancel_order" and pending["needs"] == "requester" and pending["risk"] == "HIGH"
    assert pending["token"].startswith("ct_")
    assert CANCEL_ORDER in pending["summary"]
    assert Order.objects.get(tenant=requester.tenant, order_id=CANCEL_ORDER).status == Order.Status.PAID
    # the token is stored only as its digest, never in events or audit rows
    assert not ConfirmationRequest.objects.filter(token_hash=pending["token"]).exists()
    run = Run.objects.get(pk=body["run_id"])
    assert pending["token"] not in json.dumps(list(run.events.values_list("payload", flat=True)))
    assert not any(pending["token"] in json.dumps(row, default=str) for row in AuditEvent.objects.values())

    # when: the token comes back with the conversation
    resumed = client.post("/api/v1/chat/", {"conversation_id": body["conversation_id"], "message": "yes",
                                            "confirmation_token": pending["token"]}, format="json").json()
    # then: the same run resumes and the order is cancelled once
    assert resumed["run_id"] == body["run_id"] and resumed["status"] == "COMPLETED"
    assert Order.objects.get(tenant=requester.tenant, order_id=CANCEL_ORDER).status == Order.Status.CANCELLED
    assert Cancellation.objects.count() == 1
    # and the same token again is a second decision
    again = client.post("/api/v1/chat/", {"conversation_id": body["conversation_id"], "message": "yes",
                                          "confirmation_token": pending["token"]}, format="json")
    assert_error(again, 409, "ALREADY_DECIDED")
    assert Cancellation.objects.count() == 1


def test_approver_gated_call_has_no_token(api, requester):
    body = api(requester).post("/api/v1/chat/", {"message": f"Refund order {REFUND_ORDER} because it arrived damaged"},
                               format="json").json()
    [pending] = body["pending"]
    assert pending["needs"] == "approvers" and pending["quorum"] == 2 and pending["token"] is None


def test_a_tool_i_may_not_use_is_403_not_prose(api, nobody):
    response = api(nobody).post("/api/v1/chat/", {"message": f"cancel {CANCEL_ORDER} because I can"}, format="json")
    assert_error(response, 403, "PERMISSION_DENIED")
    run = Run.objects.get(user=nobody)
    assert run.status == Run.Status.FAILED and run.error_code == "PERMISSION_DENIED"
    assert Order.objects.get(tenant=nobody.tenant, order_id=CANCEL_ORDER).status == Order.Status.PAID


def test_another_tenants_conversation_is_404(api, requester, outsider):
    theirs = api(outsider).post("/api/v1/chat/", {"message": "How many SKU-10001?"}, format="json").json()
    response = api(requester).post("/api/v1/chat/", {"message": "hi", "conversation_id": theirs["conversation_id"]},
                                   format="json")
    assert_error(response, 404, "NOT_FOUND")


def test_a_token_of_another_conversation_or_user_is_404(api, requester, outsider, cancel_pending):
    token = cancel_pending.pending[0].token
    other = api(requester).post("/api/v1/conversations/", {}, format="json").json()
    response = api(requester).post("/api/v1/chat/", {"conversation_id": other["id"], "message": "yes",
                                                     "confirmation_token": token}, format="json")
    assert_error(response, 404, "CONFIRMATION_INVALID")
    theirs = api(outsider).post("/api/v1/conversations/", {}, format="json").json()
    response = api(outsider).post("/api/v1/chat/", {"conversation_id": theirs["id"], "message": "yes",
                                                    "confirmation_token": token}, format="json")
    assert_error(response, 404, "CONFIRMATION_INVALID")
    assert Order.objects.get(tenant=requester.tenant, order_id=CANCEL_ORDER).status == Order.Status.PAID


def test_an_expired_token_is_410(api, requester, cancel_pending, monkeypatch):
    from datetime import timedelta

    from core import clock

    later = clock.now() + timedelta(hours=2)
    monkeypatch.setattr(clock, "now", lambda: later)
    response = api(requester).post("/api/v1/chat/", {
        "conversation_id": str(cancel_pending.run.conversation_id), "message": "yes",
        "confirmation_token": cancel_pending.pending[0].token}, format="json")
    assert_error(response, 410, "CONFIRMATION_EXPIRED")
    assert Order.objects.get(tenant=requester.tenant, order_id=CANCEL_ORDER).status == Order.Status.PAID


def test_a_plain_x_request_id_is_recorded_on_the_run_and_a_strange_one_ignored(api, requester):
    client = api(requester)
    body = client.post("/api/v1/chat/", {"message": "How many SKU-10001?"}, format="json",
                       HTTP_X_REQUEST_ID="req-42.a:b_c").json()
    assert Run.objects.get(pk=body["run_id"]).request_id == "req-42.a:b_c"
    assert AuditEvent.objects.filter(run_id=body["run_id"], request_id="req-42.a:b_c").exists()
    body = client.post("/api/v1/chat/", {"message": "How many SKU-10001?"}, format="json",
                       HTTP_X_REQUEST_ID="bad id; drop table").json()
    assert Run.objects.get(pk=body["run_id"]).request_id not in ("", "bad id; drop table")
