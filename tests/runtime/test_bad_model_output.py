"""Bad model output through the real loop (the pipeline's first checks: name, arguments): each bad call is answered to
the model as a failure ToolResult (INVALID_ARGUMENTS / TOOL_NOT_FOUND), audited, never executed,
never coerced into something it did not say, and the run carries on to the model's final answer.

The all-optional `list_orders` is the target wherever coercion to `{}` would have made the call
valid: a coerced call would have executed and listed orders. Arguments that say nothing at all
(none, `null`, "", whitespace) *are* the empty object (docs/providers.md): `list_orders` runs with
them, and a tool with required parameters is refused naming them (not as unparseable text).
"""
from __future__ import annotations

import json

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tests.llm.fake_openai_server import completion, json_response
from tests.tools.support import ORDER, audit_rows, model  # noqa: F401 - fixtures
from tools.catalog.models import Cancellation, Order

ONE_MB = 1024 * 1024
ENVELOPE = {"success", "code", "message", "terminal", "retryable", "data"}

BAD_CALLS = [
    # id, tool, raw arguments, expected code, audit decision, words the message must contain
    ("invalid_json", "list_orders", '{"status": "PAID"', "INVALID_ARGUMENTS", "INVALID", "not valid JSON"),
    ("empty_string_required", "cancel_order", "", "INVALID_ARGUMENTS", "INVALID", "schema"),
    ("json_null_required", "cancel_order", "null", "INVALID_ARGUMENTS", "INVALID", "schema"),
    ("json_array", "list_orders", "[]", "INVALID_ARGUMENTS", "INVALID", "JSON object"),
    ("json_string", "list_orders", json.dumps(json.dumps({"status": "PAID"})), "INVALID_ARGUMENTS", "INVALID",
     "JSON object"),
    ("trailing_comma", "cancel_order", f'{{"order_id": "{ORDER}", "reason": "late",}}', "INVALID_ARGUMENTS",
     "INVALID", "not valid JSON"),
    ("unknown_tool", "drop_all_orders", "{}", "TOOL_NOT_FOUND", "NOT_FOUND", "drop_all_orders"),
    ("extra_tenant_id", "cancel_order", json.dumps({"order_id": ORDER, "reason": "late", "tenantId": 2}),
     "INVALID_ARGUMENTS", "INVALID", "schema"),
    ("wrong_type", "cancel_order", json.dumps({"order_id": 202607290001, "reason": "late"}), "INVALID_ARGUMENTS",
     "INVALID", "schema"),
    ("one_megabyte", "cancel_order", json.dumps({"order_id": ORDER, "reason": "x" * ONE_MB}), "INVALID_ARGUMENTS",
     "INVALID", "exceed"),
]


@pytest.mark.parametrize(("case", "tool", "raw", "code", "decision", "words"), BAD_CALLS,
                         ids=[c[0] for c in BAD_CALLS])
def test_bad_call_is_answered_as_a_failure_and_the_run_completes(requester, model, case, tool, raw, code,
                                                                 decision, words):
    model.calls((f"call_{case}", tool, raw))
    model.says("I could not do that.")

    outcome = services.chat_send(user=requester, message="please do the thing")

    # the run was not crashed: the model got an answer and finished
    assert outcome.run.status == Run.Status.COMPLETED
    assert outcome.run.final_answer == "I could not do that."
    assert len(model.requests) == 2
    # the second request answers the call id with a failure envelope
    tool_messages = [m for m in model.messages(1) if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [f"call_{case}"]
    result = json.loads(tool_messages[0]["content"])
    assert set(result) == ENVELOPE
    assert (result["success"], result["code"]) == (False, code)
    assert words in result["message"]
    # audited as refused, never as executed
    [row] = audit_rows(run_id=outcome.run.pk)
    assert (row.decision, row.status, row.tool_call_id) == (decision, code, f"call_{case}")
    assert row.arguments_hash == "" and row.masked_arguments is None  # never parsed into arguments
    assert len(row.message) <= 500
    # no business change, nobody asked to confirm anything
    assert not Cancellation.objects.exists() and not ConfirmationRequest.objects.exists()
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID


def test_model_invented_tenant_id_is_named_in_the_field_errors(requester, model):
    model.calls(("call_t", "list_orders", {"status": "PAID", "tenantId": 2, "isAdmin": True}))
    model.says("ok")

    services.chat_send(user=requester, message="list paid orders")

    result = model.tool_answers(1)["call_t"]
    fields = {e["field"]: e["error"] for e in result["data"]["errors"]}
    assert set(fields) == {"tenantId", "isAdmin"}
    assert all("Extra inputs are not permitted" in e for e in fields.values())
    assert all(set(e) == {"field", "error"} for e in result["data"]["errors"])  # input values never echoed
    assert not audit_rows(decision="EXECUTED")


@pytest.mark.parametrize("arguments", [None, "", "  \n", "null"], ids=["null", "empty", "whitespace", "json_null"])
def test_arguments_that_say_nothing_are_the_empty_object(requester, model, arguments):
    # Some providers send `"arguments": null` (or "", GLM) for a call without parameters: the
    # all-optional list_orders runs with {}; cancel_order is refused naming its required fields.
    body = completion(finish_reason="tool_calls", tool_calls=[
        {"id": "call_list", "type": "function", "function": {"name": "list_orders", "arguments": arguments}},
        {"id": "call_cancel", "type": "function", "function": {"name": "cancel_order", "arguments": arguments}}])
    model.server.enqueue(json_response(body))
    model.says("ok")

    outcome = services.chat_send(user=requester, message="list orders")

    answers = model.tool_answers(1)
    assert answers["call_list"]["success"] is True and answers["call_list"]["data"]["items"]
    refused = answers["call_cancel"]
    assert (refused["success"], refused["code"]) == (False, "INVALID_ARGUMENTS")
    assert {e["field"] for e in refused["data"]["errors"]} == {"order_id", "reason"}
    assert outcome.run.status == Run.Status.COMPLETED
    assert [r.tool_call_id for r in audit_rows(decision="EXECUTED")] == ["call_list"]
    assert not ConfirmationRequest.objects.exists() and not Cancellation.objects.exists()


def test_streamed_invalid_arguments_are_refused_like_buffered_ones(requester, model):
    model.streaming = True
    model.calls(("call_s", "cancel_order", f'{{"order_id": "{ORDER}", "reason": '))
    model.says("I could not do that.")

    outcome = services.chat_send(user=requester, message=f"cancel {ORDER}")

    result = model.tool_answers(1)["call_s"]
    assert (result["success"], result["code"]) == (False, "INVALID_ARGUMENTS")
    assert outcome.run.status == Run.Status.COMPLETED
    assert not ConfirmationRequest.objects.exists()

