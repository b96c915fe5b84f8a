"""The loop's options: the iteration
bound, return_direct, the memory policy, user-controlled execution, a replaced eligibility
predicate, and which tool exceptions reach the caller instead of the model."""
from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agentplatform.llm.types import ModelTurn
from agentplatform.runtime import loop, services
from agentplatform.runtime.context import build_tool_context
from agentplatform.runtime.models import Run, RunEvent
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, ORDER, audit_rows, install_tool, model  # noqa: F401 - fixtures
from tools.catalog.models import Order
from tools.context import ToolContext
from tools.errors import ToolBusinessError
from tools.manager import ToolCallingManager
from tools.registry import ToolSpec

# -- throwaway tools ------------------------------------------------------------------------------


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LedgerUnavailable(Exception):
    """A tool's own infrastructure error, configured to propagate in one test."""


class Mode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str


def _flaky(ctx: ToolContext, params: Mode) -> dict[str, Any]:
    if params.mode == "business":
        raise ToolBusinessError("the ledger is closed for the day", code="LEDGER_CLOSED")
    if params.mode == "ledger":
        raise LedgerUnavailable("ledger at 10.0.0.7 refused the connection")
    if params.mode == "io":
        raise OSError("disk full")
    raise RuntimeError("unexpected None in the ledger client")


CLOCK = ToolSpec(name="test_clock", description="The server time (test tool).", parameters=NoParams,
                 execute=lambda ctx, params: {"now": "2026-07-29T10:00:00Z"}, return_direct=True)
FLAKY = ToolSpec(name="test_flaky", description="Fails on purpose (test tool).", parameters=Mode, execute=_flaky)


def never_execute(internal_tool_execution_enabled: bool, turn: ModelTurn) -> bool:
    return False


def always_execute(internal_tool_execution_enabled: bool, turn: ModelTurn) -> bool:
    return turn.has_tool_calls


def _tool_roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages if m["role"] == "tool" or m.get("tool_calls")]


# -- iteration bound, return_direct -----------------------------------------------------------------

def test_max_iterations_fails_the_run_with_an_error_event(requester, model, settings):
    settings.AGENT_MAX_ITERATIONS = 2
    for n in range(3):
        model.calls((f"call_{n}", "list_orders", {"status": "PAID"}))

    outcome = services.chat_send(user=requester, message="list paid orders forever")

    run = outcome.run
    assert (run.status, run.error_code, run.iterations) == (Run.Status.FAILED, "MAX_ITERATIONS", 2)
    assert len(model.requests) == 2
    error = run.events.get(type=RunEvent.Type.ERROR)
    assert error.payload["code"] == "MAX_ITERATIONS"
    assert list(run.events.values_list("type", flat=True))[-2:] == [RunEvent.Type.ERROR, RunEvent.Type.DONE]
    assert [m["tool_call_id"] for m in run.state["messages"] if m["role"] == "tool"] == ["call_0", "call_1"]


def test_return_direct_results_are_the_answer_and_the_model_is_not_called_again(requester, model, install_tool):
    install_tool(CLOCK, users=[requester])
    model.calls(("call_clock", "test_clock", {}))  # nothing else is scripted: a second call would fail the run

    outcome = services.chat_send(user=requester, message="what time is it on the server?")

    assert len(model.requests) == 1
    assert (outcome.run.status, outcome.run.stop_reason) == (Run.Status.COMPLETED, "return_direct")
    assert json.loads(outcome.run.final_answer)["data"] == {"now": "2026-07-29T10:00:00Z"}


def test_return_direct_mixed_with_another_tool_asks_the_model_again(requester, model, install_tool):
    install_tool(CLOCK, users=[requester])
    model.calls(("call_clock", "test_clock", {}), ("call_list", "list_orders", {}))
    model.says("Here is the time and the orders.")

    outcome = services.chat_send(user=requester, message="time and orders")

    assert len(model.requests) == 2
    assert outcome.run.final_answer == "Here is the time and the orders."


# -- memory policy --------------------------------------------------------------------------------

def _two_runs(requester, model) -> list[dict[str, Any]]:
    model.calls(("call_list", "list_orders", {"status": "SHIPPED"}))
    model.says("ANSWER-ONE: one shipped order.")
    model.says("ANSWER-TWO")
    first = services.chat_send(user=requester, message="QUESTION-ONE: list shipped orders")
    services.chat_send(user=requester, message="QUESTION-TWO", conversation_id=first.run.conversation_id)
    return model.messages(2)  # the second run's only request


def test_memory_keeps_user_messages_and_final_answers_but_no_tool_trace(requester, model):
    messages = _two_runs(requester, model)

    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "QUESTION-ONE: list shipped orders"), ("assistant", "ANSWER-ONE: one shipped order."),
        ("user", "QUESTION-TWO")]
    assert _tool_roles(messages) == []


def test_full_tool_trace_memory_keeps_tool_calls_and_results(requester, model, settings):
    settings.AGENT_MEMORY_FULL_TOOL_TRACE = True

    messages = _two_runs(requester, model)

    assert _tool_roles(messages) == ["assistant", "tool"]
    [call] = next(m for m in messages if m.get("tool_calls"))["tool_calls"]
    [answer] = [m for m in messages if m["role"] == "tool"]
    assert answer["tool_call_id"] == call["id"] == "call_list"
    assert json.loads(answer["content"])["data"]["items"][0]["order_id"] == "A202607290002"
    assert [m["content"] for m in messages if m["role"] == "user"] == ["QUESTION-ONE: list shipped orders",
                                                                      "QUESTION-TWO"]



def _every_tool_call_answered(messages: list[dict[str, Any]]) -> bool:
    """OpenAI's rule: an assistant message's tool calls are answered by the tool messages right after it."""
    for index, message in enumerate(messages):
        if message["role"] == "tool" and not (messages[index - 1].get("tool_calls")
                                              or messages[index - 1]["role"] == "tool"):
            return False
        if message.get("tool_calls"):
            following = []
            for later in messages[index + 1:]:
                if later["role"] != "tool":
                    break
                following.append(later["tool_call_id"])
            if sorted(following) != sorted(c["id"] for c in message["tool_calls"]):
                return False
    return True


@pytest.mark.parametrize("full_trace", [False, True], ids=["default", "full-trace"])
def test_memory_never_carries_an_unanswered_tool_call(requester, model, settings, full_trace):
    settings.AGENT_MEMORY_FULL_TOOL_TRACE = full_trace
    model.calls(("call_wait", "cancel_order", CANCEL_ARGS))  # run 1 waits for a confirmation nobody gives
    model.says("ANSWER-TWO")
    first = services.chat_send(user=requester, message=f"cancel {ORDER}")

    services.chat_send(user=requester, message="QUESTION-TWO", conversation_id=first.run.conversation_id)

    messages = model.messages(1)
    assert _every_tool_call_answered(messages), messages
    assert [m["content"] for m in messages if m["role"] == "user"] == [f"cancel {ORDER}", "QUESTION-TWO"]

# -- who executes: user-controlled execution and the eligibility predicate --------------------------

def test_user_controlled_execution_hands_back_the_calls_and_runs_nothing(requester, model):
    model.calls(("call_list", "list_orders", {"status": "SHIPPED"}), ("call_cancel", "cancel_order", CANCEL_ARGS))
    conversation = services.conversation_create(user=requester)

    outcome = loop.run_start(user=requester, message="list and cancel", conversation=conversation,
                             internal_tool_execution=False)

    # handed back, nothing executed, nothing gated
    assert [c["id"] for c in outcome.tool_calls] == ["call_list", "call_cancel"]
    assert (outcome.run.status, outcome.run.stop_reason) == (Run.Status.COMPLETED, "tool_calls")
    assert outcome.run.events.get(type=RunEvent.Type.DONE).payload["tool_calls"] == outcome.tool_calls
    assert not audit_rows() and not ConfirmationRequest.objects.exists() and len(model.requests) == 1

    # the caller runs them through the same governed pipeline, with the run's server-side context
    result = ToolCallingManager().execute_tool_calls(build_tool_context(outcome.run),
                                                     {"role": "assistant", "tool_calls": outcome.tool_calls})
    listed, cancel = result.outcomes
    assert listed.result.success and listed.result.data["items"][0]["order_id"] == "A202607290002"
    assert cancel.result.code == "CONFIRMATION_REQUIRED" and cancel.pending.token
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    assert {r.run_id for r in audit_rows()} == {outcome.run.pk}


def test_a_replaced_eligibility_predicate_is_honoured(requester, model, settings):
    settings.AGENT_TOOL_EXECUTION_ELIGIBILITY = f"{__name__}.never_execute"
    model.calls(("call_list", "list_orders", {}))

    outcome = services.chat_send(user=requester, message="list orders")

    assert [c["id"] for c in outcome.tool_calls] == ["call_list"] and not audit_rows()

    settings.AGENT_TOOL_EXECUTION_ELIGIBILITY = f"{__name__}.always_execute"
    model.calls(("call_list2", "list_orders", {}))
    model.says("listed")
    conversation = services.conversation_create(user=requester)

    outcome = loop.run_start(user=requester, message="list orders", conversation=conversation,
                             internal_tool_execution=False)

    assert outcome.tool_calls == [] and outcome.run.final_answer == "listed"
    assert [r.decision for r in audit_rows()] == ["EXECUTED"]


# -- exceptions: the model, or the caller (an error propagated to the caller ends the run) --------

@pytest.mark.parametrize(("mode", "code"), [("business", "LEDGER_CLOSED"), ("crash", "TOOL_EXECUTION_FAILED"),
                                            ("ledger", "TOOL_EXECUTION_FAILED")])
def test_tool_errors_reach_the_model_by_default(requester, model, install_tool, mode, code):
    install_tool(FLAKY, users=[requester])
    model.calls(("call_f", "test_flaky", {"mode": mode}))
    model.says("The tool failed.")

    outcome = services.chat_send(user=requester, message="go")

    answer = model.tool_answers(1)["call_f"]
    assert (answer["success"], answer["code"]) == (False, code)
    assert "10.0.0.7" not in answer["message"] and "None" not in answer["message"]  # no internals for the model
    assert outcome.run.status == Run.Status.COMPLETED


@pytest.mark.parametrize(("mode", "error", "throw", "propagate"), [
    ("business", ToolBusinessError, True, []),
    ("crash", RuntimeError, True, []),
    ("ledger", LedgerUnavailable, False, [f"{__name__}.LedgerUnavailable"]),
    ("io", OSError, False, []),
], ids=["throw-business", "throw-crash", "configured-class", "system-error"])
def test_tool_errors_reach_the_caller_when_configured(requester, model, install_tool, settings, mode, error, throw,
                                                      propagate):
    settings.TOOLS_THROW_ON_ERROR = throw
    settings.TOOLS_PROPAGATE_EXCEPTIONS = propagate
    install_tool(FLAKY, users=[requester])
    model.calls(("call_f", "test_flaky", {"mode": mode}))
    model.says("prose the caller must not get instead of the error")

    with pytest.raises(error):
        services.chat_send(user=requester, message="go")

    assert len(model.requests) == 1
    [row] = audit_rows(tool_call_id="call_f")
    assert row.decision == "FAILED"
    run = Run.objects.get(user=requester)
    assert run.status == Run.Status.FAILED and run.error_code
    assert run.events.filter(type=RunEvent.Type.ERROR).exists()
