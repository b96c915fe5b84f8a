"""A turn cut short, or carrying unparseable arguments, executes nothing and tells the model why."""
from __future__ import annotations

import json

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from audit.models import AuditEvent
from tests.llm.fake_openai_server import chunk, completion, function_call, json_response, sse_response, tool_delta
from tools.catalog.models import StockLevel

GOOD = '{"sku": "SKU-10001"}'


def _tool_messages(request) -> dict[str, dict]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in request.body["messages"] if m["role"] == "tool"}


def test_one_unparseable_call_refuses_the_whole_turn(requester, scripted_model, monkeypatch):
    # given: a turn with a valid inventory call and a call whose arguments are not JSON
    calls = []
    monkeypatch.setattr("tools.catalog.services.StockLevel.objects.filter",
                        lambda **kw: calls.append(kw) or StockLevel.objects.none())
    scripted_model.enqueue(
        json_response(completion(tool_calls=[function_call("call_ok", "query_inventory", GOOD),
                                             function_call("call_bad", "query_inventory", '{"sku": "SKU-1')],
                                 finish_reason="tool_calls")),
        json_response(completion(content="Sorry, let me try again later.")),
    )
    # when
    outcome = services.chat_send(user=requester, message="stock of SKU-10001?")
    # then: nothing executed, both call ids answered, the run went on
    assert calls == []
    answers = _tool_messages(scripted_model.requests[1])
    assert answers["call_bad"]["code"] == "INVALID_ARGUMENTS"
    assert answers["call_ok"]["code"] == "TURN_INCOMPLETE" and answers["call_ok"]["success"] is False
    assert outcome.run.status == Run.Status.COMPLETED
    assert not AuditEvent.objects.filter(decision="EXECUTED").exists()


def test_a_streamed_turn_cut_by_length_executes_nothing(requester, scripted_model, settings):
    settings.LLM_STREAM = True
    scripted_model.enqueue(
        sse_response([chunk({"role": "assistant", "content": None,
                             **tool_delta(0, id="call_cut", name="query_inventory", arguments='{"sku"')}),
                      chunk(tool_delta(0, arguments=': "SKU-10001"}')),
                      chunk({}, "length")]),
        sse_response([chunk({"role": "assistant", "content": "I was cut off."}), chunk({}, "stop")]),
    )
    outcome = services.chat_send(user=requester, message="stock of SKU-10001?")
    answers = _tool_messages(scripted_model.requests[1])
    assert answers["call_cut"]["code"] == "TURN_INCOMPLETE"
    assert "length" in answers["call_cut"]["message"]
    assert outcome.run.final_answer == "I was cut off."
    assert not AuditEvent.objects.filter(tool_name="query_inventory", decision="EXECUTED").exists()


def test_a_turn_with_more_calls_than_allowed_runs_none_of_them(requester, scripted_model, settings, monkeypatch):
    # a runaway turn (a probing attack once ran 1,000 calls of one turn): refused whole, the model
    # is told the limit and asked again
    settings.AGENT_MAX_TOOL_CALLS_PER_TURN = 3
    calls = []
    monkeypatch.setattr("tools.catalog.services.StockLevel.objects.filter",
                        lambda **kw: calls.append(kw) or StockLevel.objects.none())
    scripted_model.enqueue(
        json_response(completion(tool_calls=[function_call(f"call_{i}", "query_inventory", GOOD) for i in range(4)],
                                 finish_reason="tool_calls")),
        json_response(completion(content="I will ask for less.")),
    )

    outcome = services.chat_send(user=requester, message="stock of SKU-10001, four times")

    answers = _tool_messages(scripted_model.requests[1])
    assert calls == [] and not AuditEvent.objects.filter(decision="EXECUTED").exists()
    assert {a["code"] for a in answers.values()} == {"TOO_MANY_TOOL_CALLS"} and len(answers) == 4
    assert "at most 3" in answers["call_0"]["message"]
    assert outcome.run.final_answer == "I will ask for less."


def test_a_turn_at_the_limit_runs(requester, scripted_model, settings):
    settings.AGENT_MAX_TOOL_CALLS_PER_TURN = 2
    scripted_model.enqueue(
        json_response(completion(tool_calls=[function_call(f"call_{i}", "query_inventory", GOOD) for i in range(2)],
                                 finish_reason="tool_calls")),
        json_response(completion(content="done")),
    )

    services.chat_send(user=requester, message="stock of SKU-10001, twice")

    assert AuditEvent.objects.filter(tool_name="query_inventory", decision__in=("EXECUTED", "IDEMPOTENT_HIT")).count() == 2
