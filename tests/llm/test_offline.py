"""The offline planner through complete() and the default client (no LLM_API_KEY): same SDK path, no network."""
from __future__ import annotations

import json

import httpx2
import pytest

from agentplatform.llm.client import complete
from agentplatform.llm.offline import OfflineModelTransport, plan

pytestmark = pytest.mark.usefixtures("offline_settings")

INVENTORY_DATA = {"sku": "SKU-10001", "total_available": 120, "warehouses": [
    {"warehouse_code": "WH-HZ-01", "available_quantity": 100, "locked_quantity": 3, "updated_at": "2026-07-29T08:00:00"},
    {"warehouse_code": "WH-SH-02", "available_quantity": 20, "locked_quantity": 2, "updated_at": "2026-07-29T08:00:00"},
]}


def _result(success: bool, code: str, message: str, data=None, retryable: bool = False) -> str:
    return json.dumps({"success": success, "code": code, "message": message, "terminal": True,
                       "retryable": retryable, "data": data})


def _ask(text: str, *, stream: bool = True):
    return complete(messages=[{"role": "user", "content": text}], tools=[], stream=stream)


def _answer(question: str, results: list[str], *, stream: bool = True) -> str:
    """Ask, then feed one tool result per proposed call (in order) and return the final answer."""
    messages = [{"role": "user", "content": question}]
    turn = complete(messages=messages, tools=[], stream=stream)
    assert len(turn.tool_calls) == len(results)
    messages.append(turn.assistant_message())
    messages += [{"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(turn.tool_calls, results)]
    final = complete(messages=messages, tools=[], stream=stream)
    assert final.tool_calls == [] and final.finish_reason == "stop"
    return final.content


@pytest.mark.parametrize("stream", [True, False])
def test_english_inventory_question_plans_query_inventory(stream):
    turn = _ask("How much stock of SKU-10001 is left in WH-HZ-01?", stream=stream)

    assert turn.finish_reason == "tool_calls"
    assert [c.name for c in turn.tool_calls] == ["query_inventory"]
    assert json.loads(turn.tool_calls[0].arguments) == {"sku": "SKU-10001", "warehouse_code": "WH-HZ-01"}
    assert turn.tool_calls[0].id.startswith("call_") and len(turn.tool_calls[0].id) == 5 + 24


@pytest.mark.parametrize("stream", [True, False])
def test_chinese_inventory_question_plans_query_inventory(stream):
    turn = _ask("帮我查一下 SKU-20002 的库存", stream=stream)

    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [("query_inventory", {"sku": "SKU-20002"})]


def test_cancel_with_reason_in_english_and_chinese():
    english = _ask("Please cancel A202607290001 because the customer changed their mind.")
    chinese = _ask("取消订单 A202607290002，原因：地址填错了")
    default = _ask("cancel order A202607290003")

    assert json.loads(english.tool_calls[0].arguments) == {"order_id": "A202607290001",
                                                           "reason": "the customer changed their mind"}
    assert json.loads(chinese.tool_calls[0].arguments) == {"order_id": "A202607290002", "reason": "地址填错了"}
    assert json.loads(default.tool_calls[0].arguments)["reason"] == "customer request"


def test_refund_with_amount_and_list_with_status():
    refund = _ask("refund A202607290001 amount 12.50 because it arrived damaged")
    listing = _ask("list shipped orders")
    listing_zh = _ask("列出已发货的订单")

    assert (refund.tool_calls[0].name, json.loads(refund.tool_calls[0].arguments)) == (
        "refund_order", {"order_id": "A202607290001", "amount": 12.5, "reason": "it arrived damaged"})
    assert [(c.name, json.loads(c.arguments)) for c in listing.tool_calls] == [("list_orders", {"status": "SHIPPED"})]
    assert [(c.name, json.loads(c.arguments)) for c in listing_zh.tool_calls] == [("list_orders", {"status": "SHIPPED"})]


@pytest.mark.parametrize("stream", [True, False])
def test_two_intents_become_two_parallel_calls(stream):
    turn = _ask("check SKU-10001 and cancel A202607290001", stream=stream)

    assert [c.name for c in turn.tool_calls] == ["query_inventory", "cancel_order"]
    assert len({c.id for c in turn.tool_calls}) == 2
    assert json.loads(turn.tool_calls[1].arguments)["order_id"] == "A202607290001"


def test_calls_are_proposed_even_for_tools_not_offered():
    offered = [{"type": "function", "function": {"name": "query_inventory", "parameters": {"type": "object"}}}]

    message = plan([{"role": "user", "content": "cancel A202607290001"}], offered)

    assert [c["function"]["name"] for c in message["tool_calls"]] == ["cancel_order"]


@pytest.mark.parametrize("stream", [True, False])
def test_answer_from_tool_results_uses_the_real_numbers(stream):
    answer = _answer("check SKU-10001 and cancel A202607290001",
                     [_result(True, "OK", "OK", INVENTORY_DATA),
                      _result(True, "OK", "OK", {"order_id": "A202607290001", "cancellation_id": "42",
                                                 "current_status": "CANCELLED"})], stream=stream)

    assert "SKU-10001: 120 available, 5 locked" in answer
    assert "WH-HZ-01: 100 available, 3 locked" in answer and "WH-SH-02: 20 available, 2 locked" in answer
    assert "Order A202607290001 has been cancelled." in answer and "42" not in answer  # no record ids


def test_chinese_answer_and_failures_explained():
    answer = _answer("查询 SKU-10001 库存，并取消订单 A202607290001",
                     [_result(True, "OK", "OK", INVENTORY_DATA),
                      _result(False, "ORDER_NOT_CANCELLABLE",
                              "order A202607290001 is SHIPPED and can no longer be cancelled")])

    assert "可用 120 件，锁定 5 件" in answer
    # the failure is explained in words; its code stays in the API
    assert "无法取消" in answer and "SHIPPED" in answer and "ORDER_NOT_CANCELLABLE" not in answer


def test_rejection_expiry_and_refund_answers():
    rejected = _answer("refund A202607290001 amount 12.50", [_result(
        False, "REJECTED", "rejected by bob", {"decided_by": {"role": "approver", "username": "bob"},
                                               "reason": "fraud suspected"})])
    expired = _answer("cancel A202607290001", [_result(False, "CONFIRMATION_EXPIRED", "expired")])
    refunded = _answer("refund A202607290001 amount 12.50",
                       [_result(True, "OK", "OK", {"order_id": "A202607290001", "refund_id": "7", "amount": "12.50"})])

    # who rejected and why reach the person; the tool's title, never its wire name
    assert "Refund an order (A202607290001) was rejected by bob" in rejected and "nothing was done" in rejected
    assert "fraud suspected" in rejected and "refund_order" not in rejected
    assert "confirmation" in expired and "expired; nothing was done" in expired
    assert "Refunded 12.50 for order A202607290001." == refunded


def test_list_answer_mentions_orders_and_next_page():
    data = {"total": 25, "returned": 2, "next_cursor": "bzoxMg",
            "items": [{"order_id": "A202607290001", "status": "SHIPPED", "amount": "99.00"},
                      {"order_id": "A202607290002", "status": "SHIPPED", "amount": "15.50"}]}

    answer = _answer("list shipped orders", [_result(True, "OK", "OK", data)])

    assert "A202607290001 (SHIPPED, 99.00)" in answer and "A202607290002 (SHIPPED, 15.50)" in answer
    assert "next page" in answer


def test_no_intent_gets_help_text_and_no_calls():
    english = _ask("hello there")
    chinese = _ask("你好")

    assert english.tool_calls == [] and english.finish_reason == "stop" and "SKU-10001" in english.content
    assert chinese.tool_calls == [] and "查询库存" in chinese.content


def test_never_echoes_confirmation_tokens():
    turn = _ask("cancel A202607290001 because ct_Zk3s9QmXw1")
    answer = _answer("cancel A202607290001",
                     [_result(False, "CONFIRMATION_INVALID", "token ct_Zk3s9QmXw1 is not valid")])

    assert "ct_" not in turn.tool_calls[0].arguments
    assert "ct_" not in answer and "is not valid" in answer and "CONFIRMATION_INVALID" not in answer


def test_call_ids_are_unique_within_a_conversation():
    messages = [{"role": "user", "content": "check SKU-10001"}]
    first = complete(messages=messages, tools=[])
    messages += [first.assistant_message(),
                 {"role": "tool", "tool_call_id": first.tool_calls[0].id,
                  "content": _result(True, "OK", "OK", INVENTORY_DATA)},
                 {"role": "assistant", "content": "SKU-10001: 120 available."},
                 {"role": "user", "content": "check SKU-10001"}]

    second = complete(messages=messages, tools=[])

    assert second.tool_calls[0].id != first.tool_calls[0].id


def test_stream_splits_tool_arguments_over_at_least_two_chunks():
    with httpx2.Client(transport=OfflineModelTransport()) as http:
        response = http.post("http://offline-model.invalid/v1/chat/completions",
                             json={"model": "offline-planner", "stream": True,
                                   "messages": [{"role": "user", "content": "check SKU-10001"}]})
    events = [line[len("data: "):] for line in response.text.split("\n\n") if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events[:-1]]
    fragments = [tc["function"]["arguments"] for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])
                 if tc["function"]["arguments"]]

    assert events[-1] == "[DONE]"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len(fragments) >= 2 and json.loads("".join(fragments)) == {"sku": "SKU-10001"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_tool_not_offered_is_explained_without_codes_or_the_pipelines_words():
    answer = _answer("cancel A202607290001 because it is late", [_result(
        False, "TOOL_NOT_FOUND", "unknown tool cancel_order; use only the offered tools")])
    chinese = _answer("取消订单 A202607290001", [_result(False, "TOOL_NOT_FOUND", "unknown tool")])

    assert answer == ("I cannot cancel an order (A202607290001) here: it is not among the actions offered to you, "
                      "so nothing was done.")
    assert "取消订单（A202607290001）" in chinese and "TOOL_NOT_FOUND" not in chinese


def test_the_help_names_only_the_offered_tools():
    offered = [{"type": "function", "function": {"name": "query_inventory", "parameters": {"type": "object"}}}]
    turn = complete(messages=[{"role": "user", "content": "hello there"}], tools=offered)

    assert "check stock" in turn.content and "cancel" not in turn.content and "refund" not in turn.content
