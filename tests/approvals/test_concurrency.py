"""Exactly-once under real concurrency on PostgreSQL: many consumers
of one confirmed call, many deliveries of one resume task, and approvers double-clicking at the
same time all lead to one execution. Real threads, lined up on a barrier; no mocks."""
from __future__ import annotations

import uuid
from collections import Counter

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.services import conversation_create
from agentplatform.runtime.resume import resume_run
from agentplatform.tenancy.models import User
from approvals import approver_actions, requester_actions
from approvals.errors import ConfirmationAlreadyDecided
from approvals.models import Approval, ConfirmationRequest
from tests.tools.support import (CANCEL_ARGS, ORDER, REFUND_ORDER, assistant, audit_rows, race, resume_not_enqueued,
                                 tool_context)
from tools.catalog.models import Cancellation, Order, Refund
from tools.manager import ToolCallingManager
from tools.models import IdempotencyRecord

pytestmark = pytest.mark.postgres

CALL = "call_cancel"
def _race_consumers(requester, tool_name: str, arguments: dict, n: int = 20):
    """Gate a call of `tool_name`, confirm it with the requester's token, then let n threads consume
    and execute it at once. Returns (request id, each thread's ToolResult or exception)."""
    conversation = conversation_create(user=requester)
    message = assistant((CALL, tool_name, arguments))
    [pending] = ToolCallingManager().execute_tool_calls(tool_context(requester, conversation.pk), message).pending
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    request_id = uuid.UUID(pending.confirmation_id)

    def prepare(_):
        user = User.objects.select_related("tenant").get(pk=requester.pk)
        return tool_context(user, conversation.pk, confirmations={CALL: request_id})

    return request_id, race(n, prepare, lambda ctx: ToolCallingManager().execute_tool_calls(
        ctx, message, only={CALL}).outcomes[0].result)


def test_twenty_consumers_of_one_confirmed_call_execute_it_once(transactional_db, requester):
    # given: a confirmed cancel_order call; when: 20 threads consume and execute it at once
    request_id, results = _race_consumers(requester, "cancel_order", CANCEL_ARGS)

    # then: one execution, the others refused or handed the stored result
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert Cancellation.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.CANCELLED
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED
    assert IdempotencyRecord.objects.get().status == IdempotencyRecord.Status.SUCCEEDED
    decisions = Counter(r.decision for r in audit_rows(tool_call_id=CALL) if r.decision != "CONFIRMATION_REQUIRED")
    assert decisions["EXECUTED"] == 1
    assert decisions["EXECUTED"] + decisions["IDEMPOTENT_HIT"] + decisions["DENIED"] == 20
    winners = [r for r in results if r.success]
    assert len(winners) == 1 + decisions["IDEMPOTENT_HIT"]
    assert {w.data["cancellation_id"] for w in winners} == {str(Cancellation.objects.get().pk)}
    assert {r.code for r in results if not r.success} <= {"CONFIRMATION_INVALID"}


def test_twenty_deliveries_of_one_resume_execute_once(transactional_db, requester):
    # given: a run waiting for a cancellation, confirmed, whose resume task is delivered 20 times
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    assert outcome.run.status == Run.Status.AWAITING_CONFIRMATION
    with resume_not_enqueued():
        requester_actions.confirmation_confirm(token=outcome.pending[0].token, user=requester)

    # when
    results = race(20, lambda _: str(outcome.run.pk), resume_run)

    # then: one delivery resumed, the others skipped; the order was cancelled once
    assert sorted(map(str, results)) == ["resumed"] + ["skipped"] * 19
    run = Run.objects.get(pk=outcome.run.pk)
    assert run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.CANCELLED
    seqs = list(run.events.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert run.events.filter(type=RunEvent.Type.TOOL_EXECUTION_COMPLETED).count() == 1
    assert run.events.filter(type=RunEvent.Type.DONE).count() == 1
    tool_messages = [m for m in run.state["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1


def test_approvers_double_clicking_at_once_refund_once(transactional_db, requester, approver1, approver2):
    # given: a refund (CRITICAL, two approvers) waiting in a run
    outcome = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} because the parcel arrived damaged")
    [pending] = outcome.pending
    assert pending.needs == "approvers" and pending.quorum == 2

    # when: both approvers click "approve" five times each, all at once (the resume runs on commit)
    clicks = [approver1.pk, approver2.pk] * 5

    def approve(user_id):
        user = User.objects.get(pk=user_id)
        try:
            approver_actions.confirmation_approve(request_id=uuid.UUID(pending.confirmation_id), approver=user)
            return "approved"
        except ConfirmationAlreadyDecided:
            return "already decided"

    results = race(len(clicks), lambda i: clicks[i], approve)

    # then: two approvals, one refund, the run finished
    assert sorted(map(str, results)) == ["already decided"] * 8 + ["approved"] * 2
    assert Approval.objects.count() == 2
    assert Refund.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER).status == Order.Status.REFUNDED
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.COMPLETED


def test_a_refusal_before_any_write_is_settled_once_by_twenty_consumers(transactional_db, requester, install_tool):
    # given: a confirmed call of a tool that locks the order and then refuses (it is SHIPPED);
    # each invocation is counted
    from pydantic import BaseModel, ConfigDict

    from tools.catalog import services as catalog
    from tools.hashing import key_hash
    from tools.registry import ToolSpec

    invocations: list[int] = []

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        order_id: str

    def cancel_counted(ctx, params):
        invocations.append(1)
        return catalog.order_cancel(tenant_id=ctx.tenant_id, order_id=params.order_id, reason="r", user_id=ctx.user_id)

    install_tool(ToolSpec(name="test_cancel_counted", description="Cancel (test tool).", parameters=Args,
                          execute=cancel_counted, risk="HIGH",
                          idempotency_key=lambda ctx, p: key_hash(ctx.tenant_id, "cancel", p.order_id)),
                 users=[requester])
    Order.objects.filter(tenant=requester.tenant, order_id=ORDER).update(status=Order.Status.SHIPPED)

    # when: 20 threads consume it at once
    request_id, results = _race_consumers(requester, "test_cancel_counted", {"order_id": ORDER})

    # then: the tool ran once; its refusal was stored with the consumption in one transaction
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert len(invocations) == 1
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED
    record = IdempotencyRecord.objects.get()
    assert record.status == IdempotencyRecord.Status.FAILED and record.result["code"] == "ORDER_NOT_CANCELLABLE"
    assert not Cancellation.objects.exists()
    assert {r.code for r in results} <= {"ORDER_NOT_CANCELLABLE", "CONFIRMATION_INVALID"}
    assert Counter(r.decision for r in audit_rows(tool_call_id=CALL))["FAILED"] == 1


def test_a_tool_that_writes_then_refuses_runs_once_for_racing_consumers(transactional_db, requester, install_tool):
    # given: a confirmed call of a tool that writes, then calls out (counted), then refuses
    import threading
    import time

    from django.db.models import F
    from pydantic import BaseModel, ConfigDict

    from tools.errors import ToolBusinessError
    from tools.hashing import key_hash
    from tools.registry import ToolSpec

    outside_calls: list[int] = []
    lock = threading.Lock()

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        order_id: str

    def write_call_out_refuse(ctx, params):
        Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(amount=F("amount") + 1)
        with lock:
            outside_calls.append(1)  # stands for an e-mail, a webhook, a payment provider
        time.sleep(0.05)  # let the racers pile up behind this call
        raise ToolBusinessError("frozen by finance", code="ORDER_FROZEN")

    install_tool(ToolSpec(name="test_write_refuse", description="t", parameters=Args, execute=write_call_out_refuse,
                          risk="HIGH", idempotency_key=lambda ctx, p: key_hash(ctx.tenant_id, "frozen", p.order_id)),
                 users=[requester])
    before = Order.objects.get(tenant=requester.tenant, order_id=ORDER).amount

    # when: 20 threads consume it at once
    request_id, results = _race_consumers(requester, "test_write_refuse", {"order_id": ORDER})

    # then: the tool ran once, its write is undone, its refusal settled the call for everyone
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert len(outside_calls) == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).amount == before
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED
    assert IdempotencyRecord.objects.get().status == IdempotencyRecord.Status.FAILED
    assert {r.code for r in results} <= {"ORDER_FROZEN", "CONFIRMATION_INVALID"}


def test_racing_consumers_of_a_decision_whose_policy_became_stricter_run_nothing_and_regate_once(
        transactional_db, requester):
    # A stricter policy at consume time, under real concurrency: the risk was raised to CRITICAL after the requester
    # confirmed; 20 racing consumers each re-evaluate at consume time, none executes, and the
    # request goes back to waiting for approvers exactly once.
    from tools.models import RiskLevel, Tool

    conversation = conversation_create(user=requester)
    message = assistant((CALL, "cancel_order", CANCEL_ARGS))
    [pending] = ToolCallingManager().execute_tool_calls(tool_context(requester, conversation.pk), message).pending
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    Tool.objects.filter(name="cancel_order").update(risk_override=RiskLevel.CRITICAL)
    request_id = uuid.UUID(pending.confirmation_id)

    def prepare(_):
        user = User.objects.select_related("tenant").get(pk=requester.pk)
        return tool_context(user, conversation.pk, confirmations={CALL: request_id})

    def act(ctx):
        [outcome] = ToolCallingManager().execute_tool_calls(ctx, message, only={CALL}).outcomes
        return outcome

    results = race(20, prepare, act)

    assert not [r for r in results if isinstance(r, BaseException)], results
    assert Cancellation.objects.count() == 0
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    request = ConfirmationRequest.objects.get(pk=request_id)
    assert (request.status, request.policy, request.quorum) == ("PENDING", "APPROVERS", 2)
    assert len(audit_rows(confirmation_id=request_id, status="REGATED")) == 1
    assert not audit_rows(tool_call_id=CALL, decision="EXECUTED")
    assert sum(r.pending is not None for r in results) == 1  # one consumer re-gated; the others were refused
