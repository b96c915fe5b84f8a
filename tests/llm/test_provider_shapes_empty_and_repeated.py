"""Two kinds of provider shapes that were refused (docs/providers.md):
arguments that say nothing, and a call the provider sends twice whole.

Each shape goes through `POST /api/v1/chat/`, the real agent loop and the real `openai` SDK
against the local strict fake server, streamed and not where both apply, and asserts what ran
(database rows), what the model was told next and what the audit trail says:

- "" (GLM), whitespace, `null`, "null" or no arguments field: the empty object. `list_orders`
  (no required parameter) runs and its result reaches the model; `cancel_order` is refused
  INVALID_ARGUMENTS naming its missing fields (a schema error, not a parse error).
- the whole call sent again (a second finishing chunk, a chunk without finish_reason, without
  the id, with the name only, at the next index, `"{}"` twice, two identical entries of a
  non-streamed answer): one call; a `cancel_order` reaches the requester as ONE confirmation
  request and runs once when confirmed.
- what must stay apart stays apart: the same arguments under another id are two calls (the
  pipeline still asks the requester once), a different complete object under the same id is not
  guessed (the turn is refused), and deltas that merely look like JSON are joined as before.
"""
from __future__ import annotations

import json

import pytest

from agentplatform.llm.client import complete
from agentplatform.runtime.models import Message, Run
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.llm import fake_openai_server as shapes
from tests.llm.fake_openai_server import chunk, sse_response, tool_delta, turn_response
from tests.llm.test_provider_shapes import (  # noqa: F401 - fixtures
    CANCEL,
    ORDER,
    assistant_calls,
    audit_of,
    chat,
    confirm,
    provider,
    sent,
    stream,
    tool_answers,
)
from tools.catalog.models import Cancellation, Order

EMPTY = {"empty": "", "whitespace": " \n\t ", "null": None, "json_null": "null", "absent": shapes.ABSENT}


# -- arguments that say nothing ------------------------------------------------------------------------

@pytest.mark.parametrize("arguments", list(EMPTY.values()), ids=list(EMPTY))
def test_a_tool_without_required_parameters_runs_with_the_empty_object(requester, provider, stream, arguments):
    # given: a GLM-style call of list_orders whose arguments say nothing
    provider.enqueue(shapes.empty_arguments(stream=stream, name="list_orders", arguments=arguments))
    provider.enqueue(turn_response(stream=stream, content="Here are your orders."))

    # when
    body = chat(requester, "list my orders")

    # then: it ran, and its result reached the model under the call's id
    assert body["status"] == "COMPLETED" and body["answer"] == "Here are your orders."
    follow_up = sent(provider, 1)
    answer = tool_answers(follow_up)["call_glm_empty1"]
    assert answer["success"] is True and answer["code"] == "OK"
    assert {o["order_id"] for o in answer["data"]["items"]} >= {ORDER}
    # the history holds (and replays) the canonical empty object; the strict provider accepted it
    [call] = assistant_calls(follow_up)
    assert (call["id"], call["function"]["arguments"]) == ("call_glm_empty1", "{}")
    [stored] = Message.objects.filter(run_id=body["run_id"], role="assistant", tool_calls__isnull=False)
    assert stored.tool_calls[0]["function"]["arguments"] == "{}"
    assert provider.rejections == []
    [row] = audit_of(body["run_id"])
    assert (row.decision, row.tool_name, row.tool_call_id) == ("EXECUTED", "list_orders", "call_glm_empty1")
    assert row.arguments_hash  # parsed into arguments and hashed like any other call


@pytest.mark.parametrize("arguments", list(EMPTY.values()), ids=list(EMPTY))
def test_a_tool_with_required_parameters_is_refused_naming_them(requester, provider, stream, arguments):
    provider.enqueue(shapes.empty_arguments(stream=stream, name="cancel_order", arguments=arguments))
    provider.enqueue(turn_response(stream=stream, content="Which order?"))

    body = chat(requester, "cancel my order")

    assert body["status"] == "COMPLETED" and body["answer"] == "Which order?"
    answer = tool_answers(sent(provider, 1))["call_glm_empty1"]
    assert (answer["success"], answer["code"]) == (False, "INVALID_ARGUMENTS")
    assert answer["message"] == "arguments do not match the tool's schema"  # not "not valid JSON"
    assert {e["field"] for e in answer["data"]["errors"]} == {"order_id", "reason"}
    assert all(e["error"] == "Field required" for e in answer["data"]["errors"])
    [row] = audit_of(body["run_id"])
    assert (row.decision, row.status, row.tool_name) == ("INVALID", "INVALID_ARGUMENTS", "cancel_order")
    assert not ConfirmationRequest.objects.exists() and not Cancellation.objects.exists()
    assert provider.rejections == []


def test_an_empty_call_beside_a_valid_one_does_not_refuse_the_turn(requester, provider, stream):
    # "" used to be unparseable, which refused every call of its turn; the empty object is not
    provider.enqueue(turn_response(stream=stream, calls=[
        {"id": "call_list", "name": "list_orders", "arguments": ""},
        {"id": "call_inv", "name": "query_inventory",
         "arguments": json.dumps({"sku": "SKU-10001", "warehouse_code": "WH-HZ-01"})}]))
    provider.enqueue(turn_response(stream=stream, content="Done."))

    body = chat(requester, "orders and stock")

    answers = tool_answers(sent(provider, 1))
    assert answers["call_list"]["success"] is True and answers["call_inv"]["success"] is True
    assert sorted(a.tool_call_id for a in audit_of(body["run_id"]) if a.decision == "EXECUTED") == [
        "call_inv", "call_list"]
    assert not AuditEvent.objects.filter(status="TURN_INCOMPLETE").exists()


# -- a call sent twice whole -----------------------------------------------------------------------------

REPEATS = [(True, shape) for shape in shapes.REPEAT_SHAPES] + [(False, "identical_entries")]


@pytest.mark.parametrize(("streamed", "shape"), REPEATS, ids=[s for _, s in REPEATS])
def test_a_repeated_cancel_order_reaches_the_requester_as_one_request(requester, provider, settings, confirm,
                                                                      streamed, shape):
    settings.LLM_STREAM = streamed
    provider.enqueue(shapes.repeated_call(stream=streamed, call_id="call_rep_0001", name="cancel_order",
                                          arguments=json.dumps(CANCEL),
                                          shape=shape if streamed else "second_finish"))
    provider.enqueue(turn_response(stream=streamed, content="The order is cancelled."))

    # when: the model's turn carries the call twice
    started = chat(requester, f"cancel {ORDER}")

    # then: one call, one confirmation request for the requester, with the call's own arguments
    assert started["status"] == "AWAITING_CONFIRMATION", started
    [pending] = started["pending"]
    assert pending["tool_call_id"] == "call_rep_0001" and pending["token"]
    [request] = ConfirmationRequest.objects.filter(run_id=started["run_id"])
    assert (request.tool_name, request.tool_call_id, request.arguments) == ("cancel_order", "call_rep_0001", CANCEL)
    [stored] = Message.objects.filter(run_id=started["run_id"], role="assistant", tool_calls__isnull=False)
    assert [(c["id"], json.loads(c["function"]["arguments"])) for c in stored.tool_calls] == [("call_rep_0001", CANCEL)]
    assert [a.decision for a in audit_of(started["run_id"])] == ["CONFIRMATION_REQUIRED"]

    # when: the requester confirms it
    confirm(requester, pending["token"])

    # then: it ran once, and the model was told once
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == Run.Status.COMPLETED and run.final_answer == "The order is cancelled."
    assert Cancellation.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.CANCELLED
    follow_up = sent(provider, 1)
    assert [c["id"] for c in assistant_calls(follow_up)] == ["call_rep_0001"]
    assert list(tool_answers(follow_up)) == ["call_rep_0001"] and tool_answers(follow_up)["call_rep_0001"]["success"]
    assert [a.decision for a in audit_of(run.pk)].count("EXECUTED") == 1
    assert provider.rejections == []


@pytest.mark.parametrize("streamed", [True, False], ids=["sse", "json"])
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_an_empty_object_followed_by_its_repeat_is_one_call_that_runs(requester, provider, settings, streamed, split):
    settings.LLM_STREAM = streamed
    provider.enqueue(shapes.repeated_call(stream=streamed, call_id="call_rep_list", name="list_orders",
                                          arguments="{}", split=split))
    provider.enqueue(turn_response(stream=streamed, content="Listed."))

    body = chat(requester, "list my orders")

    assert body["status"] == "COMPLETED"
    follow_up = sent(provider, 1)
    assert [(c["id"], c["function"]["arguments"]) for c in assistant_calls(follow_up)] == [("call_rep_list", "{}")]
    assert tool_answers(follow_up)["call_rep_list"]["data"]["items"]
    assert [(a.decision, a.tool_call_id) for a in audit_of(body["run_id"])] == [("EXECUTED", "call_rep_list")]
    assert provider.rejections == []


# -- what must stay apart --------------------------------------------------------------------------------

def test_the_same_arguments_under_another_id_are_two_calls_asked_once(requester, provider, settings):
    # two calls the model made (or a server that numbers every call 0): never merged by the wire;
    # the pipeline's own rule asks the requester once for identical gated calls of one turn
    settings.LLM_STREAM = True
    arguments = json.dumps(CANCEL)
    provider.enqueue(sse_response([
        chunk({"role": "assistant", "content": None}),
        chunk(tool_delta(0, id="call_one", name="cancel_order", arguments=arguments)),
        chunk(tool_delta(0, id="call_two", name="cancel_order", arguments=arguments)),
        chunk({}, "tool_calls")]))

    started = chat(requester, f"cancel {ORDER}")

    assert started["status"] == "AWAITING_CONFIRMATION"
    [stored] = Message.objects.filter(run_id=started["run_id"], role="assistant", tool_calls__isnull=False)
    assert [c["id"] for c in stored.tool_calls] == ["call_one", "call_two"]
    assert sorted((a.tool_call_id, a.decision) for a in audit_of(started["run_id"])) == [
        ("call_one", "CONFIRMATION_REQUIRED"), ("call_two", "CONFIRMATION_REQUIRED")]
    assert ConfirmationRequest.objects.filter(run_id=started["run_id"]).count() == 1
    assert not Cancellation.objects.exists()


def test_a_different_complete_object_under_the_same_id_is_not_guessed(requester, provider, settings):
    settings.LLM_STREAM = True
    provider.enqueue(sse_response([
        chunk({"role": "assistant", "content": None}),
        chunk(tool_delta(0, id="call_x", name="cancel_order", arguments=json.dumps(CANCEL))),
        chunk(tool_delta(0, id="call_x", name="cancel_order",
                         arguments=json.dumps({**CANCEL, "order_id": "A202607290003"}))),
        chunk({}, "tool_calls")]))
    provider.enqueue(turn_response(stream=True, content="Please say which order."))

    body = chat(requester, f"cancel {ORDER}")

    assert body["status"] == "COMPLETED"
    answer = tool_answers(sent(provider, 1))["call_x"]
    assert (answer["success"], answer["code"]) == (False, "INVALID_ARGUMENTS")
    assert "not valid JSON" in answer["message"]
    assert not ConfirmationRequest.objects.exists() and not Cancellation.objects.exists()
    assert provider.rejections == []  # replayed as "{}"


def test_deltas_that_look_like_json_are_joined_as_sent(fake_openai, openai_client):
    # a complete object as a *value* inside the arguments, the id repeated on every delta (some
    # providers), and whitespace after the object: none of it is a repeat
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    fake_openai.enqueue(sse_response([
        chunk({"role": "assistant", "content": None}),
        chunk(tool_delta(0, id="c1", name="f", arguments='{"filter": ')),
        chunk(tool_delta(0, id="c1", name="f", arguments="{}")),
        chunk(tool_delta(0, id="c1", name="f", arguments=', "again": ')),
        chunk(tool_delta(0, id="c1", name="f", arguments='{"filter": {}}')),
        chunk(tool_delta(0, id="c1", name="f", arguments="}")),
        chunk(tool_delta(0, id="c1", arguments=" ")),
        chunk({}, "tool_calls")]))

    turn = complete(messages=[{"role": "user", "content": "?"}], tools=tools, stream=True, client=openai_client)

    [call] = turn.tool_calls
    assert call.id == "c1" and json.loads(call.arguments) == {"filter": {}, "again": {"filter": {}}}


def test_a_repeat_sent_as_an_object_or_respaced_is_the_same_call(fake_openai, openai_client):
    # GLM sends arguments as a JSON object; a repeat may also differ in spacing or key order
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    fake_openai.enqueue(sse_response([
        chunk({"role": "assistant", "content": None}),
        chunk(tool_delta(0, id="c1", name="f", arguments='{"b": 2, ')),
        chunk(tool_delta(0, arguments='"a": [1]}')),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": {"a": [1], "b": 2}}}]}),
        chunk(tool_delta(0, arguments='{"a":[1],"b":2}'), "tool_calls")]))
    fake_openai.enqueue(shapes.json_response(shapes.completion(finish_reason="tool_calls", tool_calls=[
        shapes.function_call("c1", "f", '{"b": 2, "a": [1]}'), shapes.function_call("c1", "f", '{"a":[1],"b":2}'),
        shapes.function_call("c1", "f", '{"a":[1],"b":3}')])))
    messages = [{"role": "user", "content": "?"}]

    streamed = complete(messages=messages, tools=tools, stream=True, client=openai_client)
    buffered = complete(messages=messages, tools=tools, stream=False, client=openai_client)

    assert [(c.id, json.loads(c.arguments)) for c in streamed.tool_calls] == [("c1", {"a": [1], "b": 2})]
    # the third entry differs: a call of its own (the id taken, it gets a fresh one)
    assert [json.loads(c.arguments) for c in buffered.tool_calls] == [{"a": [1], "b": 2}, {"a": [1], "b": 3}]
    assert buffered.tool_calls[0].id == "c1" and buffered.tool_calls[1].id != "c1"
