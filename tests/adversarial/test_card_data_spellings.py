"""Card data in spellings the masking tests did not show: a number glued to Chinese words (no
space between "卡号" and the digits), a verification code after a longer label ("CVV code: 123",
"the CVV number is 123", "cvv-123", "SecurityCode=123"), a code glued to a Chinese word after it,
and card-data keys with a suffix ("cvc_code"). Ordinary amounts, dates and "code 123" in an order
context stay readable."""
from __future__ import annotations

import pytest

from core.redaction.text import mask_text
from core.redaction.fields import mask_mapping


@pytest.mark.parametrize(("text", "masked"), [
    ("卡号4111111111111111有效期12/29安全码123", "卡号4111****1111有效期**/**安全码***"),
    ("我的信用卡是4111111111111111，谢谢", "我的信用卡是4111****1111，谢谢"),
    ("身份证110101199003071234请核对", "身份证1101****1234请核对"),
    ("电话13812345678联系", "电话138****5678联系"),
    ("安全码是123的那张卡", "安全码是***的那张卡"),
    ("CVV code: 123", "CVV code: ***"),
    ("the CVV number is 123", "the CVV number is ***"),
    ("cvv-123", "cvv-***"),
    ("cvv (123)", "cvv (***)"),
    ("cvv is: 123", "cvv is: ***"),
    ("SecurityCode=123", "SecurityCode=***"),
    ("CVV２: 123", "CVV２: ***"),
    ("cvv\u200b123", "cvv\u200b***"),
    # glued to the ASCII label that names them (ids glued to letters stay readable: below)
    ("card4111111111111111", "card4111****1111"),
    ("cardNo_4111 1111 1111 1111 ok", "cardNo_4111****1111 ok"),
    ("payment card_number-4111111111111111.", "payment card_number-4111****1111."),
    ("PAN-4111111111111111", "PAN-4111****1111"),
    ("phone13812345678", "phone138****5678"),
    ("tel_13812345678", "tel_138****5678"),
    ("mobileNumber13812345678 call", "mobileNumber138****5678 call"),
    ("customer_telephone-138 1234 5678", "customer_telephone-138****5678"),
])
def test_card_data_in_other_spellings_is_masked(text, masked):
    assert mask_text(text) == masked
    assert mask_text(masked) == masked


@pytest.mark.parametrize("text", [
    "code 123 for order A202607290001",
    "订单A202607290001金额123于12/29发货",
    "CVV checked. Order 123 ships 12/29",
    "cvv 12345",
    "SKU-10001 x 123",
    "SKU13812345678 restocked",
    "PANTONE1234567890123 swatch",
    "panel 12, telecom 13, mobility 14",
])
def test_ordinary_numbers_stay_readable(text):
    assert mask_text(text) == text


def test_card_data_keys_with_a_suffix_are_masked():
    masked = mask_mapping({"cvc_code": "123", "cvv_number": 123, "card": "4111 1111 1111 1111",
                           "verification_code": "456", "items": [{"payment": {"cvv2_value": "789"}}]})
    assert masked["cvc_code"] == masked["cvv_number"] == "****"
    assert masked["verification_code"] == "****"  # beside a card
    assert masked["items"][0]["payment"]["cvv2_value"] == "****"
    assert mask_mapping({"verification_code": "456", "order_id": "A1"})["verification_code"] == "456"  # an SMS code


@pytest.mark.parametrize("deltas, expected", [
    (["card 4111****1111. The CVV cod", "e: 1", "23 ok"], "card 4111****1111. The CVV code: *** ok"),
    (["the CVV num", "ber is 1", "23."], "the CVV number is ***."),
    (["卡号4111", "111111111111有效期1", "2/29安全码12", "3"], "卡号4111****1111有效期**/**安全码***"),
    (["cardNo4111", "111111111111 ok, phone1381", "2345678."], "cardNo4111****1111 ok, phone138****5678."),
])
def test_streamed_card_data_split_mid_label_is_masked(requester, monkeypatch, deltas, expected):
    from agentplatform.runtime import events as events_module
    from agentplatform.runtime import services
    from agentplatform.runtime.events import EventRecorder
    from agentplatform.runtime.models import Run, RunEvent

    conversation = services.conversation_create(user=requester, title="t")
    run = Run.objects.create(tenant_id=requester.tenant_id, user=requester, conversation=conversation,
                             request_id="r", state={})
    recorder = EventRecorder(run)
    clock = iter(range(0, 1000))
    monkeypatch.setattr(events_module, "_monotonic", lambda: next(clock))
    for delta in deltas:
        recorder.text(delta)
    recorder.flush_text()
    assert "".join(e.payload["text"] for e in RunEvent.objects.filter(run=run).order_by("seq")) == expected
