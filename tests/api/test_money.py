"""Money through the API: one amount has one canonical form (the currency's minor unit)
before hashing, display and execution; more precision than the currency has, NaN, Infinity and
non-positive amounts are refused with a stable code, never rounded."""
from __future__ import annotations

import json

import pytest

from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.api.conftest import REFUND_ORDER
from tests.llm.fake_openai_server import completion, function_call, json_response
from tools.catalog.models import Order, Refund


def _refund_turn(amount_json: str, *, call_id: str = "call_refund", reason: str = "arrived damaged"):
    """The model's turn proposing refund_order with `amount_json` spelled exactly as given."""
    arguments = f'{{"order_id": "{REFUND_ORDER}", "amount": {amount_json}, "reason": {json.dumps(reason)}}}'
    return json_response(completion(tool_calls=[function_call(call_id, "refund_order", arguments)],
                                    finish_reason="tool_calls"))


def _chat(client, message: str = "refund please", conversation_id: str | None = None) -> dict:
    body = {"message": message}
    if conversation_id:
        body["conversation_id"] = conversation_id
    response = client.post("/api/v1/chat/", body, format="json")
    assert response.status_code == 200, response.content[:500]
    return response.json()


def _tool_message(request, call_id: str) -> dict:
    [message] = [m for m in request.body["messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id]
    return json.loads(message["content"])


def test_three_spellings_of_one_amount_have_one_hash_and_one_display(api, requester, approver1, scripted_model):
    # given: the model spells 100 three ways, each in its own chat
    client = api(requester)
    hashes, summaries = set(), set()
    for spelling in ("1e2", '"100"', "100.000"):
        scripted_model.enqueue(_refund_turn(spelling))
        [pending] = _chat(client)["pending"]
        request = ConfirmationRequest.objects.get(pk=pending["confirmation_id"])
        # then: the stored, hashed and shown amount is the canonical 100.00
        assert request.arguments["amount"] == "100.00"
        hashes.add(request.arguments_hash)
        summaries.add(pending["summary"])
    assert len(hashes) == 1
    assert summaries == {f"Refund CNY 100.00 of order {REFUND_ORDER} / 退款 CNY 100.00，订单 {REFUND_ORDER}"}
    # the approver's API shows the canonical amount with its currency, never "1E+2"
    [item] = api(approver1).get("/api/v1/approvals/").json()["results"]  # the two older ones were superseded
    assert item["masked_arguments"]["amount"] == "100.00"
    assert item["facts"]["snapshot"]["refund_amount"] == {"amount": "100.00", "currency": "CNY",
                                                          "display": "CNY 100.00"}
    assert "1E+2" not in json.dumps(item) and "100.000" not in json.dumps(item)


def test_a_repeat_in_another_spelling_is_a_repeat_not_a_conflict(api, requester, approver1, approver2,
                                                                  scripted_model, django_capture_on_commit_callbacks):
    # given: a refund of 100.00 approved by two approvers and executed
    client = api(requester)
    scripted_model.enqueue(_refund_turn("100.00"), json_response(completion(content="Refunded.")))
    first = _chat(client)
    request_id = first["pending"][0]["confirmation_id"]
    for approver in (approver1, approver2):
        with django_capture_on_commit_callbacks(execute=True):
            response = api(approver).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
        assert response.status_code == 200
    assert Refund.objects.get().amount == 100
    # when: the model repeats it in the same conversation as 1e2
    scripted_model.enqueue(_refund_turn("1e2", call_id="call_again"), json_response(completion(content="Done.")))
    again = _chat(client, "again", conversation_id=first["conversation_id"])
    # then: answered from the record of the first execution, nothing new runs, nobody is asked
    assert again["status"] == "COMPLETED" and again["pending"] == []
    answer = _tool_message(scripted_model.requests[-1], "call_again")
    assert answer["success"] is True and answer["code"] == "OK"
    assert Refund.objects.count() == 1
    assert AuditEvent.objects.filter(tool_call_id="call_again", decision="IDEMPOTENT_HIT").exists()
    assert not AuditEvent.objects.filter(status="IDEMPOTENCY_CONFLICT").exists()


@pytest.mark.parametrize(("currency", "spelling", "code"), [
    ("CNY", "10.005", "AMOUNT_TOO_PRECISE"),
    ("CNY", '"0.001"', "AMOUNT_TOO_PRECISE"),
    ("JPY", "100.5", "AMOUNT_TOO_PRECISE"),
    ("CNY", "0", None),          # refused by the schema (greater than 0)
    ("CNY", '"-5"', None),
    ("CNY", "NaN", None),        # Python's json accepts the literal: refused as not finite
    ("CNY", '"Infinity"', None),
    ("CNY", "1e400", None),
])
def test_amounts_that_are_not_money_are_refused_with_a_stable_code(api, requester, scripted_model, currency,
                                                                   spelling, code):
    Order.objects.filter(tenant=requester.tenant, order_id=REFUND_ORDER).update(currency=currency)
    scripted_model.enqueue(_refund_turn(spelling), json_response(completion(content="Sorry.")))
    body = _chat(api(requester))
    assert body["pending"] == [] and not ConfirmationRequest.objects.exists()
    answer = _tool_message(scripted_model.requests[1], "call_refund")
    assert answer["success"] is False and answer["code"] == "INVALID_ARGUMENTS"
    [error] = answer["data"]["errors"]
    assert error["field"] == "amount"
    if code:
        assert error["code"] == code
    assert Refund.objects.count() == 0


def test_a_zero_decimal_currency_is_normalised_to_whole_units(api, requester, scripted_model):
    Order.objects.filter(tenant=requester.tenant, order_id=REFUND_ORDER).update(currency="JPY")
    scripted_model.enqueue(_refund_turn('"1.2e2"'))
    [pending] = _chat(api(requester))["pending"]
    request = ConfirmationRequest.objects.get(pk=pending["confirmation_id"])
    assert request.arguments["amount"] == "120"
    assert pending["summary"].startswith(f"Refund JPY 120 of order {REFUND_ORDER}")
    assert pending["facts"]["order_total"]["display"] == "JPY 560"
