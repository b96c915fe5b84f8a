"""Provider answers that a model wire must survive (found by attacking it): deeply nested
arguments, unreadable bytes, two calls at one index, a cut turn in user-controlled execution, a
truncating finish_reason followed by another, a refusal or a legacy function_call, over-limit
arguments replayed. A complete turn's calls run exactly once; anything else is refused with a stable
code or is MODEL_UNAVAILABLE; nothing escapes as a 500."""
from __future__ import annotations

import json

import httpx2
import openai
import pytest
from rest_framework.test import APIClient

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.llm import factory as llm_factory
from agentplatform.llm.client import complete
from agentplatform.llm.errors import ModelUnavailable
from agentplatform.runtime import loop, services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tests.llm.fake_openai_server import (FakeOpenAIServer, chunk, completion, function_call, json_response,
                                          sse_response, tool_delta, turn_response)
from tests.llm.test_client import MESSAGES, TOOLS
from tests.tools.support import model  # noqa: F401 - fixture


def _answering(body: bytes, content_type: str = "text/event-stream") -> openai.OpenAI:
    def answer(request):
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)
    return openai.OpenAI(api_key="sk-test", base_url="http://provider.invalid/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))


def _sse(*events) -> bytes:
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in (*events, "[DONE]")).encode()


def _choice(delta, finish=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _chat(user, message):
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user)}")
    return api.post("/api/v1/chat/", {"message": message}, format="json")


@pytest.fixture(params=[False, True], ids=["json", "sse"])
def stream(request, settings):
    settings.LLM_STREAM = request.param
    return request.param


@pytest.fixture
def provider(settings):
    with FakeOpenAIServer() as server:
        settings.LLM_API_KEY, settings.LLM_BASE_URL = "sk-test-4f1c9a1b2c3d4e5f", server.url
        settings.LLM_MODEL, settings.LLM_MAX_RETRIES = "gpt-4o-mini", 0
        llm_factory.reset_client()
        yield server
    llm_factory.reset_client()


# -- F1: a model's deeply nested (but small) arguments crash the request with a 500 ---------------

def test_f1_deeply_nested_arguments_are_refused_not_a_500(requester, provider, stream):
    arguments = '{"sku":' + "[" * 3000 + "]" * 3000 + "}"  # 6 KB < TOOLS_MAX_ARGUMENT_BYTES
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "call_n1", "name": "query_inventory",
                                                          "arguments": arguments}]))
    provider.enqueue(turn_response(stream=stream, content="Sorry."))

    response = _chat(requester, "How many SKU-10001?")

    assert response.status_code == 200, response.content[:200]  # today: 500 SERVER_ERROR (RecursionError)
    assert Run.objects.get(pk=response.json()["run_id"]).status == Run.Status.COMPLETED


# -- F2: provider bytes that are not readable escape as a 500 instead of MODEL_UNAVAILABLE ---------

@pytest.mark.parametrize("body", [
    b'data: {"choices":[{"index":0,"delta":{"content":"Stock is \xff"},"finish_reason":"stop"}]}\n\n'
    b'data: [DONE]\n\n',
    ('data: {"choices":[{"index":0,"delta":{"content":"x","x":' + "[" * 5000 + "]" * 5000
     + '},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n').encode(),
], ids=["non_utf8_byte", "deeply_nested_chunk"])
def test_f2_unreadable_stream_is_model_unavailable_not_a_500(requester, settings, monkeypatch, body):
    settings.LLM_STREAM = True
    monkeypatch.setattr(llm_factory, "get_client", lambda: _answering(body))

    response = _chat(requester, "list my orders")

    assert response.status_code == 200, response.content[:200]  # today: 500 SERVER_ERROR
    assert (response.json()["status"], response.json()["error"]["code"]) == ("FAILED", "MODEL_UNAVAILABLE")


def test_f2_an_index_that_is_a_digit_but_not_ascii_is_read_as_no_index():
    body = _sse({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "\u00b2", "id": "c1", "function": {
        "name": "list_orders", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]})

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body))  # int("²") raised

    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("c1", "list_orders", "{}")]


@pytest.mark.parametrize("body", [
    b'{"choices":[{"index":0,"message":{"role":"assistant","content":"h\xffi"},"finish_reason":"stop"}]}',
    ('{"choices":[{"index":0,"message":{"content":"x","x":' + "[" * 5000 + "]" * 5000
     + '},"finish_reason":"stop"}]}').encode(),
], ids=["non_utf8_byte", "deeply_nested_body"])
def test_f2_unreadable_whole_answer_is_model_unavailable(body):
    with pytest.raises(ModelUnavailable):  # today: UnicodeDecodeError / RecursionError
        complete(messages=MESSAGES, tools=TOOLS, stream=False, client=_answering(body, "application/json"))


# -- F3: two calls sent at one index are two calls, never merged into a third ----------------------

def test_f3_two_calls_at_one_index_are_not_merged_into_a_third(requester, settings, monkeypatch):
    settings.LLM_STREAM = True
    body = _sse(
        _choice({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                 "function": {"name": "refund_order", "arguments": ""}}]}),
        _choice({"tool_calls": [{"index": 0, "id": "call_b", "type": "function", "function": {
            "name": "cancel_order", "arguments": '{"order_id":"A202607290001","reason":"customer changed their mind"}'}}]}),
        _choice({}, "tool_calls"))
    monkeypatch.setattr(llm_factory, "get_client", lambda: _answering(body))

    response = _chat(requester, "cancel A202607290001")

    # no CRITICAL refund built from cancel_order's arguments: the refund sent without arguments is
    # the empty object (docs/providers.md), refused naming its missing fields; the cancellation the
    # model did send whole is its own call, asked of the requester with its own arguments
    assert response.status_code == 200, response.content[:300]
    from tests.tools.support import audit_rows

    [refund] = audit_rows(tool_call_id="call_a")
    assert (refund.tool_name, refund.status) == ("refund_order", "INVALID_ARGUMENTS")
    assert refund.masked_arguments is None
    [request] = ConfirmationRequest.objects.all()
    assert (request.tool_name, request.tool_call_id) == ("cancel_order", "call_b")
    assert request.arguments["order_id"] == "A202607290001"
    assert not audit_rows(decision="EXECUTED")


def test_f3_calls_split_at_one_index_keep_their_own_arguments():
    body = _sse(
        _choice({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "list_orders", "arguments": "{}"}}]}),
        _choice({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "query_inventory",
                                                                       "arguments": '{"sku": '}}]}),
        _choice({"tool_calls": [{"index": 0, "function": {"arguments": '"SKU-1"}'}}]}),
        _choice({}, "tool_calls"))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body))

    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("a", "list_orders", {}), ("b", "query_inventory", {"sku": "SKU-1"})]


# -- F4: user-controlled execution hands back the calls of a turn cut by `length` ----------------

def test_f4_a_cut_turn_is_not_handed_back_as_calls_to_run(requester, model):
    model.server.enqueue(json_response(completion(finish_reason="length", tool_calls=[
        function_call("call_list", "list_orders", "{}"),
        function_call("call_cancel", "cancel_order", '{"order_id": "A202607290001", "rea')])))

    outcome = loop.run_start(user=requester, message="list and cancel",
                             conversation=services.conversation_create(user=requester),
                             internal_tool_execution=False)

    # today: COMPLETED, stop_reason "tool_calls", both calls handed to the caller to execute
    assert outcome.tool_calls == [] and outcome.run.stop_reason != "tool_calls"


# -- F5: a later finish_reason overrides `length` ---------------------------------------------------

def test_f5_length_is_not_overridden_by_a_later_stop():
    body = _sse(
        _choice({"tool_calls": [{"index": 0, "id": "a", "function": {
            "name": "cancel_order", "arguments": '{"order_id":"A202607290001","reason":"x"}'}}]}),
        _choice({}, "length"),
        _choice({}, "stop"))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body))

    assert not turn.complete  # today: finish_reason "stop", complete, the call would execute


# -- F6: a turn with nothing usable completes as an empty answer ----------------------------------

@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": None, "refusal": "I'm sorry, I can't help with that request."},
    {"role": "assistant", "content": None,
     "function_call": {"name": "cancel_order", "arguments": '{"order_id":"A202607290001","reason":"x"}'}},
], ids=["refusal", "legacy_function_call"])
def test_f6_refusal_or_unread_call_is_not_an_empty_completed_answer(requester, provider, settings, message):
    settings.LLM_STREAM = False
    body = completion()
    body["choices"][0].update(message=message, finish_reason="function_call" if "function_call" in message else "stop")
    provider.enqueue(json_response(body))

    result = _chat(requester, "cancel A202607290001").json()

    # today: COMPLETED with answer None (the refusal text / the call silently dropped)
    assert result["answer"] or result["status"] == "FAILED"


# -- F7: over-limit arguments are refused but replayed in full on every later request ------------

def test_f7_over_limit_arguments_are_not_replayed(requester, provider, settings):
    settings.LLM_STREAM = True
    big = json.dumps({"sku": "A" * (2 * 1024 * 1024)})
    chunks = [chunk(tool_delta(0, id="c1", name="query_inventory"))]
    chunks += [chunk(tool_delta(0, arguments=big[i:i + 65536])) for i in range(0, len(big), 65536)]
    provider.enqueue(sse_response([*chunks, chunk({}, "tool_calls")]))
    provider.enqueue(turn_response(stream=True, content="too big"))

    _chat(requester, "x")

    replayed = [c["function"]["arguments"] for m in provider.requests[1].body["messages"]
                if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert all(len(a) <= settings.TOOLS_MAX_ARGUMENT_BYTES for a in replayed)  # today: 2 MB replayed


# -- found by a review of the fixes above ------------------------------------------------------------

@pytest.mark.parametrize("chunks", [
    # Poolside, mlx-openai-server: the id changes on later chunks of the same call
    [{"index": 0, "id": "c1", "function": {"name": "query_inventory", "arguments": '{"sku":'}},
     {"index": 0, "id": "c2", "function": {"arguments": ' "SKU-1"}'}}],
    # a fresh id and the name repeated on every chunk
    [{"index": 0, "id": "c1", "function": {"name": "query_inventory", "arguments": '{"sku":'}},
     {"index": 0, "id": "c2", "function": {"name": "query_inventory", "arguments": ' "SKU-1"}'}}],
], ids=["id-changes", "id-and-name-repeated"])
def test_a_call_whose_id_changes_midway_stays_one_call(chunks):
    body = _sse(*[_choice({"tool_calls": [c]}) for c in chunks], _choice({}, "tool_calls"))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body))

    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("c1", "query_inventory", {"sku": "SKU-1"})]


def test_the_same_tool_again_under_a_new_id_after_whole_arguments_is_a_second_call():
    body = _sse(
        _choice({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "query_inventory",
                                                                        "arguments": '{"sku": "SKU-1"}'}}]}),
        _choice({"tool_calls": [{"index": 0, "id": "c2", "function": {"name": "query_inventory",
                                                                        "arguments": '{"sku": "SKU-2"}'}}]}),
        _choice({}, "tool_calls"))

    turn = complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body))

    assert [(c.id, json.loads(c.arguments)["sku"]) for c in turn.tool_calls] == [("c1", "SKU-1"), ("c2", "SKU-2")]


@pytest.mark.parametrize("first", ["eos", "STOP", "end_turn"])
def test_a_truncating_reason_after_a_complete_one_in_another_spelling_still_sticks(first):
    body = _sse(
        _choice({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "list_orders", "arguments": "{}"}}]}),
        _choice({}, first), _choice({}, "length"))

    assert not complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body)).complete


def test_an_error_of_the_callers_on_text_is_not_blamed_on_the_provider():
    body = _sse(_choice({"content": "hello"}), _choice({}, "stop"))

    def broken(text):
        raise ValueError("a bug of ours")

    with pytest.raises(ValueError, match="a bug of ours"):
        complete(messages=MESSAGES, tools=TOOLS, stream=True, client=_answering(body), on_text=broken)


def test_arguments_over_the_byte_limit_in_few_characters_are_not_replayed(settings):
    from agentplatform.llm.normalize import replayable_arguments

    settings.TOOLS_MAX_ARGUMENT_BYTES = 16384
    cjk = json.dumps({"reason": "损" * 8200}, ensure_ascii=False)  # 8,214 characters, 24,614 bytes
    assert len(cjk) < 16384 < len(cjk.encode())
    assert replayable_arguments(cjk) == "{}"
    assert replayable_arguments('{"reason": "ok"}') == '{"reason": "ok"}'
