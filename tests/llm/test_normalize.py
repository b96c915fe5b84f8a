"""agentplatform.llm.normalize and core.text: the canonical turn, unit by unit, and the
less common shapes through the real SDK (complete() against the fake server)."""
from __future__ import annotations

import json
import logging

from agentplatform.llm import normalize
from agentplatform.llm.client import complete
from agentplatform.llm.normalize import RawCall, normalize_calls, normalize_turn, replay_messages
from core.text import storable_text, unstorable_reason
from tests.llm.fake_openai_server import chunk, completion, json_response, sse_response, validate_request


def test_duplicate_missing_reused_and_unusable_ids_become_unique():
    calls = normalize_calls([
        RawCall(id="functions.cancel_order:0", name="cancel_order", arguments=['{"order_id": "A1"}']),
        RawCall(id="functions.cancel_order:0", name="cancel_order", arguments=['{"order_id": "A2"}']),
        RawCall(id=None, name="list_orders", arguments=["{}"]),
        RawCall(id="", name="list_orders", arguments=["{}"]),
        RawCall(id="used_before", name="list_orders", arguments=["{}"]),
        RawCall(id="x" * 200, name="list_orders", arguments=["{}"]),
        RawCall(id="bad\x00id", name="list_orders", arguments=["{}"]),
    ], taken={"used_before"})

    ids = [c.id for c in calls]
    assert ids[0] == "functions.cancel_order:0"  # the first holder keeps its id
    assert len(set(ids)) == len(ids) == 7 and "used_before" not in ids
    assert all(i.isalnum() and len(i) == 9 for i in ids[1:])  # Mistral's format, accepted by all
    assert [json.loads(c.arguments)["order_id"] for c in calls[:2]] == ["A1", "A2"]


def test_phantom_entries_are_dropped_and_logged_but_a_nameless_call_with_arguments_is_kept(caplog):
    with caplog.at_level(logging.WARNING, logger="agentplatform.llm.normalize"):
        calls = normalize_calls([RawCall(id="c1", name="list_orders", arguments=["{}"]),
                                 RawCall(id="", name="", arguments=[""]),
                                 RawCall(id="c3", name=None, arguments=[None]),
                                 RawCall(id="c4", name="", arguments=['{"a": 1}'])])

    assert [c.id for c in calls] == ["c1", "c4"]  # c4 reaches the pipeline: TOOL_NOT_FOUND, audited
    assert sum("no name and no arguments" in r.getMessage() for r in caplog.records) == 2


def test_arguments_objects_are_canonical_null_is_the_empty_object_and_unstorable_text_is_escaped():
    [obj, null, nul, joined] = normalize_calls([
        RawCall(id="a", name="f", arguments=[{"b": "é", "a": [1, 2]}]),
        RawCall(id="b", name="f", arguments=[None]),
        RawCall(id="c", name="f", arguments=['{"reason": "late', "\x00", '"}']),
        RawCall(id="d", name="f", arguments=["", {"x": 1}, ""]),
    ])

    assert obj.arguments == '{"a":[1,2],"b":"é"}'
    assert null.arguments == "{}"  # the empty object: the tool's schema judges it (docs/providers.md)
    assert "\x00" not in nul.arguments and json.loads(nul.arguments)["reason"] == "late\x00"
    assert unstorable_reason(json.loads(nul.arguments))
    assert joined.arguments == '{"x":1}'


def test_finish_reasons_and_content_parts_are_read_in_openai_terms():
    turn = normalize_turn(content=[{"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
                                   {"type": "text", "text": "Hello"}], raw_calls=[], finish_reason="end_turn")
    assert (turn.content, turn.reasoning, turn.finish_reason, turn.complete) == ("Hello", "hmm", "stop", True)
    assert normalize.finish_reason_of("max_tokens") == "length"
    assert normalize.finish_reason_of("tool_use") == "tool_calls"
    assert normalize_turn(content="", raw_calls=[], finish_reason="weird").complete is False  # fail closed


def test_replay_keeps_what_parses_and_reasoning_of_the_current_turn_only():
    messages = [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok", "reasoning_content": "old thought"},
        {"role": "user", "content": "now"},
        {"role": "assistant", "content": None, "reasoning_content": "new thought", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": '{"x": '}},
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": "\\u0000"}'}},
            {"id": "d", "type": "function", "function": {"name": "f", "arguments": "[]"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "{}"}, {"role": "tool", "tool_call_id": "b", "content": "{}"},
        {"role": "tool", "tool_call_id": "c", "content": "{}"}, {"role": "tool", "tool_call_id": "d", "content": "{}"},
    ]
    original = json.dumps(messages)

    replayed = replay_messages(messages)

    assert json.dumps(messages) == original  # the run's record is untouched
    assert [c["function"]["arguments"] for c in replayed[3]["tool_calls"]] == ['{"x": 1}', "{}", "{}", "{}"]
    assert "reasoning_content" not in replayed[1] and replayed[3]["reasoning_content"] == "new thought"
    assert validate_request({"messages": replayed}, "deepseek") == ""


def test_storable_text_joins_surrogate_pairs_and_replaces_the_rest():
    assert storable_text("a\x00b") == "a\ufffdb"
    assert storable_text("\ud83d\ude00 \udc00") == "\U0001F600 \ufffd"
    assert storable_text("plain") == "plain"
    assert unstorable_reason({"k": ["ok", {"\x00": 1}]}) == "contains a NUL character (U+0000)"


def test_content_given_as_parts_through_the_sdk(fake_openai, openai_client):
    body = completion(content=None)
    body["choices"][0]["message"]["content"] = [{"type": "thinking", "thinking": "consider"},
                                                {"type": "text", "text": "Forty-two."}]
    fake_openai.enqueue(json_response(body), sse_response([
        chunk({"role": "assistant", "content": [{"type": "text", "text": "Forty"}]}),
        chunk({"content": "-two."}), chunk({}, "eos")]))

    buffered = complete(messages=[{"role": "user", "content": "?"}], tools=[], stream=False, client=openai_client)
    streamed = complete(messages=[{"role": "user", "content": "?"}], tools=[], stream=True, client=openai_client)

    assert (buffered.content, buffered.reasoning) == ("Forty-two.", "consider")
    assert (streamed.content, streamed.finish_reason) == ("Forty-two.", "stop")
