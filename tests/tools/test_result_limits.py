"""Result conversion: list_orders masks phone,
address and name and pages at 20 with next_cursor; every result the model reads is at most 20
items and 32 KB of UTF-8 JSON, with total / returned telling it what it did not get."""
from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agentplatform.runtime import services
from agentplatform.runtime.services import conversation_create
from tests.tools.support import assistant, tool_context
from tools.catalog.models import Order
from tools.manager import ToolCallingManager
from tools.registry import ToolSpec

MAX_BYTES = 32 * 1024
PHONE = re.compile(r"^\d{3}\*{4}\d{4}$")


def _size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@pytest.fixture
def many_orders(requester) -> list[str]:
    """25 more acme orders (32 in all with the 7 seeded), each with a full phone number and address."""
    for n in range(25):
        Order.objects.create(tenant=requester.tenant, order_id=f"A2026080100{n:02d}", amount=Decimal("10.00"),
                             customer_name=f"Customer {n}", customer_phone=f"1390000{n:04d}",
                             shipping_address=f"Hangzhou Binjiang District, Jiangnan Road {n}, Building 7")
    return list(Order.objects.filter(tenant=requester.tenant).values_list("order_id", flat=True))


def test_list_orders_masks_personal_data_and_pages_at_twenty(requester, many_orders, model):
    model.calls(("call_p1", "list_orders", {}))
    model.says("Here are the first 20 orders.")

    outcome = services.chat_send(user=requester, message="list all orders")

    # page 1, exactly as the model read it
    page1 = model.tool_answers(1)["call_p1"]["data"]
    assert (page1["total"], page1["returned"], len(page1["items"])) == (len(many_orders), 20, 20) == (32, 20, 20)
    assert page1["next_cursor"]
    text = json.dumps(page1, ensure_ascii=False)
    for order in Order.objects.filter(tenant=requester.tenant):
        assert order.customer_phone not in text and order.shipping_address not in text
        assert order.customer_name not in text
    for item in page1["items"]:
        assert PHONE.fullmatch(item["customer_phone"]), item["customer_phone"]
        assert item["shipping_address"].endswith("****") and len(item["shipping_address"]) <= 10
        assert item["customer_name"].endswith("**")

    # page 2 through the same pipeline with the cursor the model got
    message = assistant(("call_p2", "list_orders", {"cursor": page1["next_cursor"]}))
    [second] = ToolCallingManager().execute_tool_calls(tool_context(requester, outcome.run.conversation_id),
                                                       message).outcomes
    page2 = second.result.data
    assert (page2["total"], page2["returned"], page2["next_cursor"]) == (32, 12, None)
    ids = [i["order_id"] for i in page1["items"]] + [i["order_id"] for i in page2["items"]]
    assert len(ids) == len(set(ids)) and sorted(ids) == sorted(many_orders)  # every acme order once, no globex


def test_a_forged_cursor_is_a_business_failure_not_a_crash(requester):
    message = assistant(("call_c", "list_orders", {"cursor": "not-a-cursor"}))
    [outcome] = ToolCallingManager().execute_tool_calls(
        tool_context(requester, conversation_create(user=requester).pk), message).outcomes
    assert (outcome.result.success, outcome.result.code) == (False, "INVALID_CURSOR")


# -- the 20 items / 32 KB limit on any tool ---------------------------------------------------------

class Size(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: int
    chars: int
    text: str = "x"


def _big(ctx, params: Size) -> Any:
    if params.items == 0:
        return {"report": params.text * params.chars}
    return {"items": [{"n": n, "blob": params.text * params.chars} for n in range(params.items)]}


BIG = ToolSpec(name="test_big_result", description="Returns a big result (test tool).", parameters=Size,
               execute=_big)


def _run_big(requester, **arguments) -> dict[str, Any]:
    message = assistant(("call_big", "test_big_result", arguments))
    [outcome] = ToolCallingManager().execute_tool_calls(
        tool_context(requester, conversation_create(user=requester).pk), message).outcomes
    assert outcome.result.success
    assert len(outcome.tool_message()["content"].encode("utf-8")) <= MAX_BYTES + 200  # the envelope adds little
    return outcome.result.data


def test_more_than_twenty_items_are_cut_to_twenty(requester, install_tool):
    install_tool(BIG, users=[requester])
    data = _run_big(requester, items=50, chars=10)
    assert (data["total"], data["returned"], len(data["items"])) == (50, 20, 20)
    assert [i["n"] for i in data["items"]] == list(range(20))


@pytest.mark.parametrize("text", ["x", "库"], ids=["ascii", "three-byte-utf8"])
def test_items_beyond_32_kb_are_dropped_from_the_end(requester, install_tool, text):
    install_tool(BIG, users=[requester])
    # 20 items of 1,200 characters: 24 KB as characters, 72 KB as UTF-8 when each is 3 bytes
    data = _run_big(requester, items=20, chars=1200 * (3 if text == "x" else 1), text=text)
    assert _size(data) <= MAX_BYTES
    assert data["total"] == 20 and data["returned"] == len(data["items"]) < 20
    assert [i["n"] for i in data["items"]] == list(range(data["returned"]))
    one_more = {**data, "items": data["items"] + [{"n": data["returned"], "blob": data["items"][0]["blob"]}]}
    assert _size(one_more) > MAX_BYTES  # as many as fit, not fewer


def test_a_result_that_cannot_fit_is_replaced_by_a_truncation_marker(requester, install_tool):
    install_tool(BIG, users=[requester])
    data = _run_big(requester, items=0, chars=40_000)
    assert data == {"truncated": True, "bytes": _size({"report": "x" * 40_000})}
