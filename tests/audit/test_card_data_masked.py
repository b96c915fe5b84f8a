"""Card data beside a card number (verification codes, expiry dates) through the masking functions
and every exit: PCI DSS 4.0 requirement 3.3.1.2 (the code is never stored after authorization) and
3.5 (the expiry is protected with the number). Ordinary amounts and dates stay readable."""
from __future__ import annotations

import json
import logging

import pytest

from core.redaction.text import mask_text, split_open_tail
from agentplatform.runtime import events as events_module
from agentplatform.runtime import services
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Message, Run, RunEvent
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.llm.fake_openai_server import (chunk, completion, json_response, sse_response, turn_response,
                                         usage_chunk)
from core.redaction.fields import mask_mapping


@pytest.mark.parametrize(("text", "masked"), [
    ("card 4111****1111 cvv 123 exp 12/29", "card 4111****1111 cvv *** exp **/**"),
    ("card 4111 1111 1111 1111, CVV: 123, expiry 12/2029", "card 4111****1111, CVV: ***, expiry **/**"),
    ("cvc=1234", "cvc=***"),
    ("CVV2 #456 please", "CVV2 #*** please"),
    ("the security code is 123", "the security code is ***"),
    ("security_code: 999", "security_code: ***"),
    ("valid thru 12-29", "valid thru **/**"),
    ("Card expiry 2029年12月", "Card expiry **/**"),
    ("卡号 6222 0212 3456 7890，有效期 12/29，安全码 123", "卡号 6222****7890，有效期 **/**，安全码 ***"),
    ("信用卡有效期至2029/12，CVV码：321", "信用卡有效期至**/**，CVV码：***"),
    ("尾号1111的卡，背面三位 456", "尾号1111的卡，背面三位 ***"),
    ("Visa ending **** 1111, code 1234, expires 01/30", "Visa ending **** 1111, code ***, expires **/**"),
    ('{"card": "4111****1111", "cvv": "123", "exp_date": "12/29"}',
     '{"card": "4111****1111", "cvv": "***", "exp_date": "**/**"}'),
    # as a card is copied: number, expiry, code (and code before expiry)
    ("4111 1111 1111 1111 12/29 123", "4111****1111 **/** ***"),
    ("4111111111111111 12/29 123", "4111****1111 **/** ***"),
    ("4111-1111-1111-1111 123 12/29", "4111****1111 *** **/**"),
    # an expiry or code right after a masked one belongs to the same card
    ("card 4111****1111 cvv 737, 11/2031", "card 4111****1111 cvv ***, **/**"),
    ("card expiry 12/29 737", "card expiry **/** ***"),
])
def test_card_data_is_masked_in_free_text(text, masked):
    assert mask_text(text) == masked
    assert mask_text(masked) == masked  # idempotent


@pytest.mark.parametrize("text", [
    "Refund A202607290003 amount 123 on 12/29",  # an amount and a date, no card anywhere
    "order amount 123, delivered 12/29, SKU-10001",
    "the coupon expires 12/29 and costs 123",  # an expiry label without a card: a coupon's date
    "有效期 12/29 的优惠券，金额 123",
    "code 1234 for order A202607290001",  # "code" alone is not a card's code
    "3 items at 100.00 on 2026-11-30T19:04:05.123456+00:00, 1/2 done, version 12.29",
    "cvv 12345",  # not a verification code's shape
])
def test_amounts_and_dates_without_card_context_stay_readable(text):
    assert mask_text(text) == text


def test_a_card_in_the_earlier_piece_of_a_stream_makes_an_expiry_card_data():
    assert mask_text("exp 12/29 thanks") == "exp 12/29 thanks"
    assert mask_text("exp 12/29 thanks", context="paid with card 4111****1111 ") == "exp **/** thanks"
    assert mask_text("12/29 and 123", context="4111****1111 ") == "**/** and 123"


@pytest.mark.parametrize(("text", "held"), [
    ("card 4111****1111 cvv 12", "cvv 12"),
    ("card 4111****1111 exp 12/", "exp 12/"),
    ("card 4111****1111 CVV: ", "CVV: "),
    ("the card's secur", "secur"),
    ("卡号 6222****7890 有效", "有效"),
    ("card 4111****1111 12/2", "4111****1111 12/2"),
])
def test_a_streamed_label_and_its_value_are_held_until_whole(text, held):
    assert split_open_tail(text) == (text[:-len(held)], held)


def test_streamed_card_data_cut_between_flushes_is_masked(requester, monkeypatch):
    conversation = services.conversation_create(user=requester, title="t")
    run = Run.objects.create(tenant_id=requester.tenant_id, user=requester, conversation=conversation,
                             request_id="r", state={})
    recorder = EventRecorder(run)
    clock = iter(range(0, 1000))
    monkeypatch.setattr(events_module, "_monotonic", lambda: next(clock))  # every delta is a timed flush

    for delta in ["card 4111 1111 11", "11 1111 and c", "vv 1", "23, e", "xp 1", "2/", "29. 安全", "码 4", "56 ok",
                  " then 4111****1111 1", "2/29 7", "89 done"]:
        recorder.text(delta)
    recorder.flush_text()

    text = "".join(e.payload["text"] for e in RunEvent.objects.filter(run=run).order_by("seq"))
    assert text == "card 4111****1111 and cvv ***, exp **/**. 安全码 *** ok then 4111****1111 **/** *** done"


def test_card_data_keys_are_masked_in_tool_arguments_and_results():
    masked = mask_mapping({
        "cvv": 123, "CVC2": "1234", "security_code": "999", "securityCode": "999", "card_expiry": "12/29",
        "exp_date": "12/29", "exp_month": 12, "expYear": 2029, "安全码": "123", "valid_thru": "12/29",
        "card": {"number": "4111111111111111", "expiry": "12/29"},
        "payment": {"card_number": "4111 1111 1111 1111", "expiration": "2029-12"},
        "reason": "card 4111 1111 1111 1111 cvv 123", "amount": 123, "paid": True,
    })

    assert masked == {
        "cvv": "****", "CVC2": "****", "security_code": "****", "securityCode": "****", "card_expiry": "****",
        "exp_date": "****", "exp_month": "****", "expYear": "****", "安全码": "****", "valid_thru": "****",
        "card": {"number": "4111****1111", "expiry": "****"},
        "payment": {"card_number": "****", "expiration": "****"},
        "reason": "card 4111****1111 cvv ***", "amount": 123, "paid": True,
    }


def test_an_expiry_key_without_a_card_beside_it_stays_readable():
    stock = {"sku": "SKU-10001", "batch": {"expiry_date": "2027-01-31", "quantity": 123}}

    assert mask_mapping(stock) == stock


# What must never appear, in any spelling the user or the model used.
CARD_DATA = ["cvv 737", "CVV: 737", "cvv: 737", "安全码 737", "安全码737", "11/31", "11/2031", "12/29", "cvc=4242"]


def _leaked(text: str) -> list[str]:
    return [s for s in CARD_DATA if s in text]


def test_card_data_in_a_chat_reaches_no_exit(requester, approver1, scripted_model, caplog, settings,
                                             django_capture_on_commit_callbacks):
    caplog.set_level(logging.DEBUG)
    settings.LLM_STREAM = True
    # given: the user pastes the card data; the model (which only sees it masked) is scripted to
    # write it anyway, into the refund reason and into streamed text cut inside each value
    said = "card 4111 1111 1111 1111 cvv 737 exp 11/31"
    scripted_model.enqueue(
        sse_response([
            chunk({"role": "assistant", "content": ""}),
            *[chunk({"content": piece}) for piece in ["Refunding: card 4111****1111, CVV: 7", "37, valid thru 11/3",
                                                      "1; 卡号 4111****1111 安全码7", "37 有效期 11/2", "031."]],
            chunk({"tool_calls": [{"index": 0, "id": "call_refund", "type": "function", "function": {
                "name": "refund_order", "arguments": json.dumps({
                    "order_id": "A202607290003", "amount": 10.0,
                    "reason": "card 4111****1111 cvv: 737 exp 11/31, cvc=4242"})}}]}),
            chunk({}, "tool_calls"), usage_chunk()]),
        turn_response(stream=True, content="Rejected (card 4111****1111 cvv 737, 11/2031)."),
    )

    # when: the user asks, an approver rejects with the card data in the reason
    outcome = services.chat_send(user=requester, message=f"Refund A202607290003 amount 10, {said}, 安全码 737")
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    from approvals.approver_actions import confirmation_reject
    with django_capture_on_commit_callbacks(execute=True):
        confirmation_reject(request_id=request.pk, approver=approver1, reason="no: cvv 737, card expiry 11/31")

    # then
    run = Run.objects.get(pk=outcome.run.pk)
    request.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    exits = {
        "prompts": json.dumps([{**m, "tool_calls": None} for r in scripted_model.requests
                               for m in r.body["messages"]], ensure_ascii=False),
        "messages": json.dumps(list(Message.objects.filter(conversation=run.conversation).values_list(
            "content", flat=True)), ensure_ascii=False),
        # the texts of the run's memory; the model's own tool-call arguments stay as proposed (they
        # are bound to the confirmation by their hash), as in test_every_exit_masked
        "run state": json.dumps([m.get("content") for m in run.state["messages"]], ensure_ascii=False),
        "run events": json.dumps(list(RunEvent.objects.filter(run=run).values_list("payload", flat=True)),
                                 ensure_ascii=False),
        "audit rows": json.dumps(list(AuditEvent.objects.filter(tenant=requester.tenant).values(
            "message", "masked_arguments")), ensure_ascii=False),
        "request": json.dumps([request.summary, request.masked_arguments, request.context_excerpt,
                               request.decision_reason], ensure_ascii=False),
        "logs": caplog.text,
    }
    assert {name: _leaked(text) for name, text in exits.items() if _leaked(text)} == {}
    assert "cvv ***" in exits["prompts"] and "exp **/**" in exits["prompts"]
    assert "CVV: ***, valid thru **/**" in exits["run events"] and "安全码*** 有效期 **/**" in exits["run events"]
    assert "cvv: *** exp **/**, cvc=***" in exits["audit rows"]


def test_card_data_sent_to_the_async_chat_is_masked_before_it_is_stored(requester, scripted_model):
    # chat_start stored the message with only tokens redacted: the card number went to the model
    scripted_model.enqueue(json_response(completion(content="ok")))

    run = services.chat_start(user=requester, message="card 4111 1111 1111 1111 cvv 737 exp 11/31")

    stored = Message.objects.get(run=run, role="user").content
    assert stored == "card 4111****1111 cvv *** exp **/**"
    assert Run.objects.get(pk=run.pk).state["messages"][0]["content"] == stored
