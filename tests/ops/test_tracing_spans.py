"""Our spans (docs/observability.md), recorded with the SDK's in-memory exporter: names, parents,
attributes, and one trace from the requester's message to the side effect across a resume."""
from __future__ import annotations

import datetime

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from tests.ops.tracing_support import attrs, spans  # noqa: F401 - fixture
from tests.tools.support import CANCEL_ARGS, ORDER, model  # noqa: F401 - fixture
from tools.catalog.models import Cancellation, Refund

pytestmark = pytest.mark.django_db


def picked(span, *keys: str) -> dict:
    """The span's attributes named `keys` (a missing one reads as None)."""
    found = attrs(span)
    return {key: found.get(key) for key in keys}


def test_a_low_call_is_an_execute_tool_span_under_the_runs_invoke_agent_beside_its_chat_spans(requester, model,
                                                                                              spans):
    model.calls(("call_inv", "query_inventory", {"sku": "SKU-10001"}))
    model.says("In stock.")

    outcome = services.chat_send(user=requester, message="check SKU-10001")

    assert outcome.run.status == Run.Status.COMPLETED
    run_span = spans.one("invoke_agent")
    tool = spans.one("execute_tool query_inventory")
    chats = spans.named("chat ")
    assert len(chats) == 2 and all(spans.parent_of(c, run_span) for c in chats)
    assert spans.parent_of(tool, run_span) and run_span.parent is None
    assert {c.name for c in chats} == {"chat gpt-4o-mini"}  # the scripted model's settings.LLM_MODEL
    assert picked(run_span, "gen_ai.operation.name", "agentplatform.run.phase", "agentplatform.run.id",
                  "gen_ai.conversation.id", "agentplatform.run.status", "agentplatform.run.iterations") == {
        "gen_ai.operation.name": "invoke_agent", "agentplatform.run.phase": "start",
        "agentplatform.run.id": str(outcome.run.pk), "gen_ai.conversation.id": str(outcome.run.conversation_id),
        "agentplatform.run.status": "COMPLETED", "agentplatform.run.iterations": 2}
    tool_attrs = attrs(tool)
    assert {k: tool_attrs[k] for k in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type",
        "agentplatform.channel", "agentplatform.decision", "agentplatform.outcome.code", "agentplatform.risk",
        "agentplatform.policy", "agentplatform.idempotent_hit", "agentplatform.pending")} == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "query_inventory",
        "gen_ai.tool.call.id": "call_inv", "gen_ai.tool.type": "function", "agentplatform.channel": "chat",
        "agentplatform.decision": "EXECUTED", "agentplatform.outcome.code": "OK", "agentplatform.risk": "MEDIUM",
        "agentplatform.policy": "NONE", "agentplatform.idempotent_hit": False, "agentplatform.pending": False}
    # arguments and results are not attributes by default
    assert not any(k.startswith("gen_ai.tool.call.arguments") or k.startswith("gen_ai.tool.call.result")
                   for k in tool_attrs)
    chat = attrs(chats[0])
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.provider.name"] == "127.0.0.1"
    assert chat["gen_ai.response.finish_reasons"] == ("tool_calls",)


def test_token_usage_is_on_the_chat_span_when_the_provider_sends_it(requester, spans, settings):
    settings.LLM_STREAM = False  # the offline model sends usage with a whole completion

    services.chat_send(user=requester, message="check SKU-10001")

    chat = attrs(spans.named("chat ")[0])
    assert chat["gen_ai.provider.name"] == "agentplatform.offline"
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0


def test_the_requesters_confirmation_resumes_the_run_in_the_trace_it_started_in(transactional_db, requester, model,
                                                                                 spans):
    # transactional_db: decisions commit for real, so what they defer to the commit runs inside their span
    model.calls(("call_cancel", "cancel_order", CANCEL_ARGS))
    model.says("Cancelled.")
    first = services.chat_send(user=requester, message=f"cancel {ORDER}")
    run = Run.objects.get(pk=first.run.pk)
    started = spans.one("invoke_agent")
    assert run.trace_context["traceparent"].split("-")[1] == format(started.context.trace_id, "032x")
    assert run.trace_context["traceparent"].split("-")[2] == format(started.context.span_id, "016x")
    proposed = spans.one("execute_tool cancel_order")
    assert attrs(proposed)["agentplatform.decision"] == "CONFIRMATION_REQUIRED"
    assert attrs(proposed)["agentplatform.pending"] is True
    assert attrs(proposed)["agentplatform.risk"] == "HIGH" and attrs(proposed)["agentplatform.policy"] == "REQUESTER"

    services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                       confirmation_token=first.pending[0].token)

    assert Cancellation.objects.count() == 1
    resumed = [s for s in spans.named("invoke_agent") if attrs(s)["agentplatform.run.phase"] == "resume"]
    assert len(resumed) == 1 and spans.parent_of(resumed[0], started)
    executed = [s for s in spans.named("execute_tool cancel_order") if s is not proposed]
    assert len(executed) == 1 and spans.parent_of(executed[0], resumed[0])
    assert attrs(executed[0])["agentplatform.decision"] == "EXECUTED"
    assert attrs(executed[0])["agentplatform.consumes_confirmation"] is True
    decide = spans.one("approval.decide")
    assert attrs(decide)["agentplatform.approval.decision"] == "confirm"
    assert attrs(decide)["agentplatform.approval.status"] == "CONFIRMED"
    wait = spans.one("approval.wait")
    assert spans.parent_of(wait, started)  # in the run's trace, whatever request decided it
    assert attrs(wait)["agentplatform.approval.status"] == "CONFIRMED"
    # one trace from the message to the side effect
    assert {s.context.trace_id for s in (started, proposed, wait, resumed[0], executed[0])} == {
        started.context.trace_id}


def test_two_approvers_decide_and_the_wait_starts_when_the_request_was_made(transactional_db, requester, approver1,
                                                                            approver2, spans):
    first = services.chat_send(user=requester, message="Refund A202607290003 amount 50 because it arrived broken")
    request = ConfirmationRequest.objects.get(pk=first.pending[0].confirmation_id)
    started = spans.one("invoke_agent")

    approver_actions.confirmation_approve(request_id=request.pk, approver=approver1)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver2)

    assert Refund.objects.count() == 1
    decisions = spans.named("approval.decide")
    assert [attrs(d)["agentplatform.approval.approvals"] for d in decisions] == [1, 2]
    assert [attrs(d)["agentplatform.approval.status"] for d in decisions] == ["PENDING", "CONFIRMED"]
    assert all(attrs(d)["agentplatform.approval.decision"] == "approve" and attrs(d)["agentplatform.approval.quorum"] == 2
               and attrs(d)["agentplatform.approval.request.id"] == str(request.pk) for d in decisions)
    wait = spans.one("approval.wait")
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    assert wait.start_time == (request.created_at - epoch) // datetime.timedelta(microseconds=1) * 1000
    assert wait.end_time >= decisions[1].start_time and spans.parent_of(wait, started)
    assert wait.links and wait.links[0].context.span_id == decisions[1].context.span_id
    # the resume (eager Celery task, sent from inside the second decision) continues the run's trace
    resumed = [s for s in spans.named("invoke_agent") if attrs(s)["agentplatform.run.phase"] == "resume"]
    assert len(resumed) == 1 and spans.parent_of(resumed[0], started)
    assert resumed[0].links[0].context.span_id == decisions[1].context.span_id
    executed = [s for s in spans.named("execute_tool refund_order") if attrs(s)["agentplatform.decision"] == "EXECUTED"]
    assert len(executed) == 1 and spans.parent_of(executed[0], resumed[0])
    assert attrs(executed[0])["agentplatform.risk"] == "CRITICAL"


def test_the_same_confirmed_call_twice_in_a_turn_runs_once_and_the_other_span_is_an_idempotent_hit(
        transactional_db, requester, model, spans):
    model.calls(("call_a", "cancel_order", CANCEL_ARGS), ("call_b", "cancel_order", CANCEL_ARGS))
    model.says("Cancelled once.")
    first = services.chat_send(user=requester, message=f"cancel {ORDER} twice")

    services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                       confirmation_token=first.pending[0].token)

    assert Cancellation.objects.count() == 1
    resumed = [s for s in spans.named("execute_tool cancel_order") if attrs(s)["agentplatform.consumes_confirmation"]]
    assert sorted((attrs(s)["gen_ai.tool.call.id"], attrs(s)["agentplatform.decision"],
                   attrs(s)["agentplatform.idempotent_hit"]) for s in resumed) == [
        ("call_a", "EXECUTED", False), ("call_b", "IDEMPOTENT_HIT", True)]
