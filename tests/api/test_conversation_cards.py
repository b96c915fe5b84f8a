"""The conversation payload the chat rebuilds its decision cards from, the conversation list's
status and search, and the synchronous chat answer's `tool_calls`."""
from __future__ import annotations

import json
from datetime import datetime

from django.contrib.auth import get_user_model

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tests.api.conftest import CANCEL_ORDER, REFUND_ORDER, assert_error

WIRE_NAMES = ("cancel_order", "refund_order", "query_inventory", "list_orders")


def _conversation(client, conversation_id) -> dict:
    response = client.get(f"/api/v1/conversations/{conversation_id}/")
    assert response.status_code == 200, response.content[:300]
    return response.json()


def _people_words(card: dict) -> str:
    return " ".join([card["status_text"], card["tool_label"], card["edit_text"], card["summary"]])


def test_a_rejection_is_rebuilt_with_who_rejected_and_why(api, requester, approver1, refund_pending,
                                                          django_capture_on_commit_callbacks):
    # given: a refund waiting for approvers, rejected by approver1 with a reason
    approver1.first_name, approver1.last_name = "Bob", "Approver"
    approver1.save()
    request_id = refund_pending.pending[0].confirmation_id
    with django_capture_on_commit_callbacks(execute=True):
        rejected = api(approver1).post(f"/api/v1/approvals/{request_id}/reject/",
                                       {"reason": "fraud suspected"}, format="json")
    assert rejected.status_code == 200, rejected.json()
    # when: the requester reads the conversation again
    body = _conversation(api(requester), refund_pending.run.conversation_id)
    # then: the card names the person and the reason, in words; the codes stay beside them
    [card] = body["cards"]
    assert (card["outcome"], card["status"], card["state"]) == ("REJECTED", "CANCELLED", "failed")
    assert card["decided_by"] == {"role": "approver", "name": "Bob Approver"}
    assert card["reason"] == "fraud suspected"
    assert "Rejected by Bob Approver" in card["status_text"] and "fraud suspected" in card["status_text"]
    assert card["tool"] == "refund_order" and card["tool_label"] == "Refund an order / 订单退款"
    assert card["run_id"] == str(refund_pending.run.pk)
    assert [d["name"] for d in card["decisions"]] == ["Bob Approver"]
    assert card["decisions"][0]["comment"] == "fraud suspected"
    words = _people_words(card)
    assert not any(name in words for name in WIRE_NAMES) and "CANCELLED" not in words
    assert "approver(s)" not in words and str(request_id) not in words
    assert body["status"] == "answered"


def test_an_edit_is_rebuilt_as_old_to_new_with_the_arguments_that_ran(
        api, requester, approver1, approver2, django_capture_on_commit_callbacks):
    # given: a refund of 30.00 that approver1 edits down to 20.00 and approver2 approves
    outcome = services.chat_send(user=requester, message=f"Refund {REFUND_ORDER} amount 30 because it arrived damaged")
    [pending] = outcome.pending
    stored = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    edited = api(approver1).post(f"/api/v1/approvals/{stored.pk}/edit/", {
        "arguments": {"order_id": REFUND_ORDER, "amount": "20", "reason": stored.arguments["reason"]},
        "base_arguments_hash": stored.arguments_hash, "comment": "only the damaged part"}, format="json")
    assert edited.status_code == 200, edited.json()
    with django_capture_on_commit_callbacks(execute=True):
        approved = api(approver2).post(f"/api/v1/approvals/{stored.pk}/approve/",
                                       {"arguments_hash": edited.json()["arguments_hash"]}, format="json")
    assert approved.status_code == 200, approved.json()
    # when: the requester reads the conversation
    [card] = _conversation(api(requester), outcome.run.conversation_id)["cards"]
    # then: what ran (20.00), and the change old → new with who made it
    assert card["outcome"] == "EXECUTED" and card["state"] == "ok"
    assert card["arguments"]["amount"] == "20.00"
    assert card["summary"].startswith(f"Refund CNY 20.00 of order {REFUND_ORDER}")
    assert "CNY 30.00 → CNY 20.00" in card["edit_text"] and approver1.username in card["edit_text"]
    [edit] = card["edits"]
    assert edit["by"] == approver1.username and edit["comment"] == "only the damaged part"
    assert edit["changes"][0]["field"] == "amount" and edit["changes"][0]["to"] == "20.00"
    assert "Done" in card["status_text"] and approver2.username in card["status_text"]


def test_a_pending_card_needs_the_requester_and_says_so(api, requester, cancel_pending):
    body = _conversation(api(requester), cancel_pending.run.conversation_id)
    [card] = body["cards"]
    assert (card["outcome"], card["needs"], card["state"]) == ("PENDING", "requester", "pending")
    assert card["status_text"].startswith("Only you can confirm this call")
    assert card["confirmation_id"] == str(cancel_pending.pending[0].confirmation_id)
    assert body["status"] == "waiting_for_you" and body["latest_run"]["status"] == "AWAITING_CONFIRMATION"
    # the token never appears in what the page reads
    assert cancel_pending.pending[0].token not in json.dumps(body)


def test_another_users_or_tenants_conversation_is_404(api, requester, approver1, outsider, cancel_pending):
    conversation_id = cancel_pending.run.conversation_id
    for other in (approver1, outsider):  # same tenant, other user; other tenant
        assert_error(api(other).get(f"/api/v1/conversations/{conversation_id}/"), 404, "NOT_FOUND")
        assert_error(api(other).get(f"/api/v1/runs/{cancel_pending.run.pk}/"), 404, "NOT_FOUND")
        listed = api(other).get("/api/v1/conversations/").json()["results"]
        assert str(conversation_id) not in {c["id"] for c in listed}


def test_the_list_shows_a_status_tells_titles_apart_and_searches(api, requester, cancel_pending):
    client = api(requester)
    first = client.post("/api/v1/conversations/", {"title": "Stock question"}, format="json").json()
    second = client.post("/api/v1/conversations/", {"title": "Stock question"}, format="json").json()
    assert (first["title"], second["title"]) == ("Stock question", "Stock question (2)")
    assert first["status"] == "new" and first["cards"] == []
    rows = {c["id"]: c for c in client.get("/api/v1/conversations/").json()["results"]}
    waiting = rows[str(cancel_pending.run.conversation_id)]
    assert (waiting["status"], waiting["status_text"]) == ("waiting_for_you", "Waiting for you / 等待您确认")
    run = Run.objects.get(pk=cancel_pending.run.pk)
    assert datetime.fromisoformat(waiting["last_activity"]) == run.updated_at  # the run's time, not the row's
    # search finds a conversation by what the person wrote in it, not only by its title
    found = client.get("/api/v1/conversations/", {"q": CANCEL_ORDER}).json()["results"]
    assert [c["id"] for c in found] == [str(cancel_pending.run.conversation_id)]
    assert len(client.get("/api/v1/conversations/", {"q": "stock QUESTION"}).json()["results"]) == 2
    assert_error(client.get("/api/v1/conversations/", {"q": "x" * 101}), 400, "INVALID_ARGUMENTS")


def test_the_synchronous_answer_lists_the_tool_calls_that_ran(api, requester):
    client = api(requester)
    body = client.post("/api/v1/chat/", {"message": "How many SKU-10001 in WH-HZ-01?"}, format="json").json()
    assert body["status"] == "COMPLETED"
    [call] = body["tool_calls"]
    assert call["function"]["name"] == "query_inventory" and (call["success"], call["code"]) == (True, "OK")
    assert json.loads(call["function"]["arguments"])["sku"] == "SKU-10001"
    # a gated call is listed once it ran: after the token resumed the run
    waiting = client.post("/api/v1/chat/", {"message": f"Please cancel order {CANCEL_ORDER} because it is late"},
                          format="json").json()
    assert waiting["tool_calls"] == [] and len(waiting["pending"]) == 1
    resumed = client.post("/api/v1/chat/", {"conversation_id": waiting["conversation_id"], "message": "yes",
                                            "confirmation_token": waiting["pending"][0]["token"]},
                          format="json").json()
    [cancel] = resumed["tool_calls"]
    assert cancel["function"]["name"] == "cancel_order" and cancel["success"] is True
    assert json.loads(cancel["function"]["arguments"])["order_id"] == CANCEL_ORDER


def test_a_display_name_falls_back_to_the_username(approver1):
    from agentplatform.runtime.cards import display_name

    assert display_name(approver1) == approver1.username
    user = get_user_model()(username="x", first_name="Li", last_name="Lei")
    assert display_name(user) == "Li Lei"
