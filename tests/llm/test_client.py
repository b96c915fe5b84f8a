"""complete() through the real openai SDK against a scripted chat-completions server."""
from __future__ import annotations

import json
import time

import openai
import pytest

from agentplatform.llm.client import complete
from agentplatform.llm.errors import ModelUnavailable
from agentplatform.llm.factory import OFFLINE_BASE_URL, get_client, reset_client
from agentplatform.llm.types import ModelToolCall
from tests.llm.conftest import TEST_API_KEY
from tests.llm.fake_openai_server import (
    chunk,
    completion,
    error_response,
    function_call,
    json_response,
    sse_response,
    tool_delta,
    usage_chunk,
)

MESSAGES = [{"role": "system", "content": "You are the operations assistant."},
            {"role": "user", "content": "How many SKU-10001 are in WH-HZ-01, and cancel A202607290001?"}]
TOOLS = [{"type": "function", "function": {
    "name": "query_inventory", "description": "Look up stock.",
    "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"],
                   "additionalProperties": False}}}]
FAST_RETRY = {"retry-after-ms": "10"}


def test_streamed_arguments_split_over_several_chunks_are_joined(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_Qx1", "type": "function",
             "function": {"name": "query_inventory", "arguments": ""}}], "refusal": None}),
        chunk(tool_delta(0, arguments='{"')),
        chunk(tool_delta(0, arguments='sku":"SKU-')),
        chunk(tool_delta(0, arguments='10001","warehouse_code"')),
        chunk(tool_delta(0, arguments=':"WH-HZ-01"}')),
        chunk({}, "tool_calls"),
        usage_chunk(),
    ]))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client, model="gpt-4o-mini")

    assert turn.tool_calls == [ModelToolCall("call_Qx1", "query_inventory",
                                             '{"sku":"SKU-10001","warehouse_code":"WH-HZ-01"}')]
    assert turn.finish_reason == "tool_calls" and turn.complete
    assert turn.content == ""


def test_two_parallel_calls_interleaved_by_index_come_out_in_index_order(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([
        chunk({"role": "assistant", "content": None}),
        chunk(tool_delta(1, id="call_B", name="cancel_order", arguments='{"order_id": "A2026')),
        chunk(tool_delta(0, id="call_A", name="query_inventory", arguments='{"sku": ')),
        chunk(tool_delta(1, arguments='07290001", "reason": "dup')),
        chunk(tool_delta(0, arguments='"SKU-10001"}')),
        chunk(tool_delta(1, arguments='licate order"}')),
        chunk({}, "tool_calls"),
    ]))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)

    assert [(c.id, c.name) for c in turn.tool_calls] == [("call_A", "query_inventory"), ("call_B", "cancel_order")]
    assert json.loads(turn.tool_calls[0].arguments) == {"sku": "SKU-10001"}
    assert json.loads(turn.tool_calls[1].arguments) == {"order_id": "A202607290001", "reason": "duplicate order"}


def test_text_alongside_tool_calls_reaches_on_text_delta_by_delta(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me "}),
        chunk({"content": "check the stock."}),
        chunk(tool_delta(0, id="call_T", name="query_inventory", arguments='{"sku":')),
        chunk(tool_delta(0, arguments='"SKU-10001"}')),
        chunk({}, "tool_calls"),
    ]))
    deltas: list[str] = []

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, on_text=deltas.append, client=openai_client)

    assert deltas == ["Let me ", "check the stock."]
    assert turn.content == "Let me check the stock."
    assert turn.tool_calls[0].arguments == '{"sku":"SKU-10001"}'
    assert turn.assistant_message()["content"] == "Let me check the stock."


def test_invalid_json_arguments_are_passed_through_raw(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([
        chunk(tool_delta(0, id="call_bad", name="query_inventory", arguments='{"sku": "SKU-10001"')),
        chunk(tool_delta(0, arguments=', "tenantId": 7,}')),
        chunk({}, "tool_calls"),
    ]))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)

    # Parsing (and refusing) is the tool pipeline's job, not the client's.
    assert turn.tool_calls[0].arguments == '{"sku": "SKU-10001", "tenantId": 7,}'


def test_rate_limited_then_success_is_retried_by_the_sdk(fake_openai, openai_client):
    fake_openai.enqueue(
        error_response(429, "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3.",
                       type="requests", code="rate_limit_exceeded", headers=FAST_RETRY),
        sse_response([chunk({"role": "assistant", "content": "All good."}), chunk({}, "stop")]),
    )

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)

    assert turn.content == "All good."
    assert len(fake_openai.requests) == 2


def test_truncated_call_comes_back_incomplete(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([
        chunk(tool_delta(0, id="call_L", name="cancel_order", arguments='{"order_id": "A202607290001", "rea')),
        chunk({}, "length"),
    ]))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)

    assert turn.finish_reason == "length"
    assert turn.complete is False
    assert turn.tool_calls[0].arguments == '{"order_id": "A202607290001", "rea'


def test_server_error_beyond_the_retries_is_model_unavailable(fake_openai, openai_client):
    for _ in range(3):
        fake_openai.enqueue(error_response(500, "The server had an error while processing your request.",
                                           type="server_error", headers=FAST_RETRY))

    with pytest.raises(ModelUnavailable) as raised:
        complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)

    assert len(fake_openai.requests) == 3  # one try + max_retries=2
    assert "500" in str(raised.value)
    assert TEST_API_KEY not in str(raised.value)
    assert raised.value.__cause__ is None


def test_connection_dropped_mid_stream_is_model_unavailable(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([
        chunk(tool_delta(0, id="call_D", name="cancel_order", arguments='{"order_id": ')),
        chunk(tool_delta(0, arguments='"A202607290001"')),
        chunk({}, "tool_calls"),
    ], drop_after=2))

    with pytest.raises(ModelUnavailable, match="connection"):
        complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)


def test_stream_without_finish_reason_is_model_unavailable(fake_openai, openai_client):
    fake_openai.enqueue(sse_response([chunk({"role": "assistant", "content": "Half an ans"})]))

    with pytest.raises(ModelUnavailable, match="ended before"):
        complete(messages=MESSAGES, tools=TOOLS, stream=True, client=openai_client)


def test_non_streaming_turn_with_text_and_parallel_calls(fake_openai, openai_client):
    fake_openai.enqueue(json_response(completion(
        content="Checking both.",
        tool_calls=[function_call("call_1", "query_inventory", '{"sku":"SKU-10001"}'),
                    function_call("call_2", "cancel_order", '{"order_id":"A202607290001","reason":"dup"}')],
        finish_reason="tool_calls")))
    seen: list[str] = []

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=False, on_text=seen.append, client=openai_client)

    assert turn.content == "Checking both." and seen == ["Checking both."]
    assert [c.id for c in turn.tool_calls] == ["call_1", "call_2"]
    assert turn.tool_calls[1].arguments == '{"order_id":"A202607290001","reason":"dup"}'
    assert turn.finish_reason == "tool_calls"
    assert fake_openai.requests[0].body.get("stream") in (None, False)


def test_tools_are_sent_only_when_given_and_tool_choice_never(fake_openai, openai_client):
    fake_openai.enqueue(json_response(completion(content="one")), json_response(completion(content="two")))

    complete(messages=MESSAGES, tools=TOOLS, stream=False, client=openai_client, model="gpt-4o-mini")
    complete(messages=MESSAGES, tools=[], stream=False, client=openai_client, model="gpt-4o-mini")

    with_tools, without_tools = (r.body for r in fake_openai.requests)
    assert with_tools["tools"] == TOOLS and "tool_choice" not in with_tools
    assert "tools" not in without_tools and "tool_choice" not in without_tools
    assert with_tools["model"] == "gpt-4o-mini" and with_tools["messages"] == MESSAGES
    assert fake_openai.requests[0].path == "/v1/chat/completions"
    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {TEST_API_KEY}"


def test_stream_defaults_to_the_setting(fake_openai, openai_client, settings):
    settings.LLM_STREAM = True
    fake_openai.enqueue(sse_response([chunk({"content": "streamed"}), chunk({}, "stop")]))

    turn = complete(messages=MESSAGES, tools=[], client=openai_client)

    assert turn.content == "streamed"
    assert fake_openai.requests[0].body["stream"] is True


def test_get_client_is_cached_per_settings_and_offline_without_key(settings):
    settings.LLM_API_KEY = ""
    reset_client()
    try:
        offline = get_client()
        assert get_client() is offline
        assert str(offline.base_url).rstrip("/") == OFFLINE_BASE_URL
        settings.LLM_API_KEY = "sk-live-abc"
        settings.LLM_BASE_URL = "https://api.example.test/v1"
        settings.LLM_MAX_RETRIES = 5
        live = get_client()
        assert live is not offline
        assert str(live.base_url).rstrip("/") == "https://api.example.test/v1" and live.max_retries == 5
    finally:
        reset_client()


# -- the answer read as decoded JSON (docs/performance.md): any part of the wrong JSON type is ignored, never a crash

def _client_answering(content_type: str, body: bytes) -> openai.OpenAI:
    """An SDK client whose endpoint answers every request with `body` under `content_type`."""
    import httpx2

    def answer(request):
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    return openai.OpenAI(api_key="sk-test", base_url="http://provider.invalid/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))


def _sse(*events: object) -> bytes:
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in (*events, "[DONE]")).encode()


def test_stream_parts_of_the_wrong_json_type_are_skipped_and_the_real_call_is_kept():
    stream = _sse(
        "42",                                                          # a chunk that is not an object
        {"choices": None},                                             # choices null
        {"choices": ["not a choice", {"index": 0, "delta": None}]},     # a choice that is not an object; delta null
        {"choices": [{"index": 0, "delta": {"content": "Cancelling.", "tool_calls": [
            "junk", {"index": 0, "id": "call_1", "function": "not an object"}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"name": "cancel_order", "arguments": '{"order_id":"A202607290001",'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '"reason":"dup"}'}}]}, "finish_reason": "tool_calls"}]},
    )
    seen: list[str] = []

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, on_text=seen.append,
                    client=_client_answering("text/event-stream", stream))

    assert seen == ["Cancelling."] and turn.content == "Cancelling."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("call_1", "cancel_order", {"order_id": "A202607290001", "reason": "dup"})]
    assert turn.finish_reason == "tool_calls"


def test_a_whole_answer_sent_as_text_is_read_and_one_that_is_not_json_is_model_unavailable():
    body = json.dumps(completion(content="Done.")).encode()

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=False, client=_client_answering("text/plain", body))
    assert turn.content == "Done." and turn.finish_reason == "stop"

    with pytest.raises(ModelUnavailable, match="not JSON"):
        complete(messages=MESSAGES, tools=TOOLS, stream=False, client=_client_answering("text/plain", b"<html>oops"))
    for shapeless in (b"[]", b'{"choices": null}', b'{"choices": ["x"]}'):
        with pytest.raises(ModelUnavailable, match="no choices"):
            complete(messages=MESSAGES, tools=TOOLS, stream=False,
                     client=_client_answering("application/json", shapeless))


def test_tool_call_and_choice_indexes_sent_as_strings_or_numbers_are_read_as_integers():
    def call(index, **delta):
        return {"choices": [{"index": "0", "delta": {"tool_calls": [{"index": index, **delta}]}}]}

    stream = _sse(
        call("0", id="call_a", function={"name": "query_inventory", "arguments": '{"sku":'}),
        call(None, function={"arguments": '"SKU-1"}'}),                       # continues call 0
        call(1, id="call_b", function={"name": "query_inventory", "arguments": '{"sku":"SKU-2"}'}),
        call("10", id="call_c", function={"name": "query_inventory", "arguments": '{"sku":"SKU-3"}'}),
        call(2.0, id="call_d", function={"name": "query_inventory", "arguments": '{"sku":"SKU-4"}'}),
        {"choices": [{"index": 1, "delta": {"content": "a second choice (n > 1) is not read"}}]},
        {"choices": [{"index": 0.0, "delta": {}, "finish_reason": "tool_calls"}]},
    )

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True,
                    client=_client_answering("text/event-stream", stream))

    assert [(c.id, json.loads(c.arguments)["sku"]) for c in turn.tool_calls] == [
        ("call_a", "SKU-1"), ("call_b", "SKU-2"), ("call_d", "SKU-4"), ("call_c", "SKU-3")]  # 0, 1, 2, 10
    assert turn.content == "" and turn.finish_reason == "tool_calls"


def test_a_whole_answer_that_is_json_null_is_model_unavailable_at_once(settings):
    settings.LLM_DEADLINE_SECONDS = 30

    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="no answer"):
        complete(messages=MESSAGES, tools=TOOLS, stream=False, client=_client_answering("application/json", b"null"))
    assert time.monotonic() - started < 5  # not the deadline
