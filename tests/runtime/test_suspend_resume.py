"""Suspension and resume: in a mixed turn what may run runs and
the gated call waits; every tool_call_id is answered exactly once; rejected and expired calls are
told apart; permissions, tenant policy and risk are checked again when a confirmation is consumed."""
from __future__ import annotations

import datetime
import json
import uuid

from guardian.shortcuts import remove_perm

from core import clock
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions, expiry, requester_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, ORDER, REFUND_ORDER, audit_rows, model  # noqa: F401 - fixtures
from tools.catalog.models import Cancellation, Order, Refund
from tools.models import ApprovalPolicy, Tool
from tools.services import tenant_tool_set_enabled

Status = ConfirmationRequest.Status
REFUND_ARGS = {"order_id": REFUND_ORDER, "reason": "arrived damaged"}


def _answers_per_call(run: Run) -> dict[str, list[dict]]:
    answers: dict[str, list[dict]] = {}
    for message in run.state["messages"]:
        if message["role"] == "tool":
            answers.setdefault(message["tool_call_id"], []).append(json.loads(message["content"]))
    return answers


def _order_status(user, order_id: str = ORDER) -> str:
    return Order.objects.get(tenant=user.tenant, order_id=order_id).status


def test_mixed_turn_runs_the_auto_call_and_waits_for_the_gated_one(requester, model):
    model.calls(("call_inv", "query_inventory", {"sku": "SKU-10001"}), ("call_cancel", "cancel_order", CANCEL_ARGS))
    model.says("Stock checked and order cancelled.")

    first = services.chat_send(user=requester, message=f"check SKU-10001 and cancel {ORDER}")

    # the inventory call ran; the cancellation waits; the model is not called again yet
    assert first.run.status == Run.Status.AWAITING_CONFIRMATION
    assert [p.tool_call_id for p in first.pending] == ["call_cancel"]
    assert list(_answers_per_call(first.run)) == ["call_inv"]
    assert _order_status(requester) == Order.Status.PAID and len(model.requests) == 1

    done = services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                              confirmation_token=first.pending[0].token)

    # every tool_call_id has exactly one tool message, after its assistant message
    run = Run.objects.get(pk=done.run.pk)
    assert run.status == Run.Status.COMPLETED
    answers = _answers_per_call(run)
    assert {k: len(v) for k, v in answers.items()} == {"call_inv": 1, "call_cancel": 1}
    assert answers["call_cancel"][0]["data"]["current_status"] == "CANCELLED"
    roles = [m["role"] for m in run.state["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"]
    # and the model saw both answers in its next request
    assert set(model.tool_answers(1)) == {"call_inv", "call_cancel"}
    assert Cancellation.objects.count() == 1


def test_the_model_waits_until_every_gated_call_of_the_turn_is_decided(requester, model):
    other = {"order_id": REFUND_ORDER, "reason": "duplicate"}
    model.calls(("call_a", "cancel_order", CANCEL_ARGS), ("call_b", "cancel_order", other))
    model.says("One cancelled, one declined.")
    first = services.chat_send(user=requester, message="cancel both")
    tokens = {p.tool_call_id: p.token for p in first.pending}

    # one decided: nothing resumes, nothing executes
    assert services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                              confirmation_token=tokens["call_a"]).run.status == Run.Status.AWAITING_CONFIRMATION
    assert len(model.requests) == 1 and not Cancellation.objects.exists()

    # the other declined with the token first shown (confirming call_a did not void it): the run
    # resumes, the confirmed call runs, the declined one is REJECTED
    requester_actions.confirmation_cancel(token=tokens["call_b"], user=requester)
    services.run_continue(run_id=first.run.pk)

    answers = model.tool_answers(1)
    assert answers["call_a"]["success"] is True
    assert (answers["call_b"]["success"], answers["call_b"]["code"]) == (False, "REJECTED")
    assert _order_status(requester) == Order.Status.CANCELLED
    assert _order_status(requester, REFUND_ORDER) == Order.Status.PAID


def test_rejected_and_expired_refunds_answer_the_model_differently(requester, approver1, model, monkeypatch,
                                                                 django_capture_on_commit_callbacks):
    model.calls(("call_rejected", "refund_order", REFUND_ARGS))
    # another refundable order: a second refund of the same order would supersede the first
    model.calls(("call_expired", "refund_order", {**REFUND_ARGS, "order_id": ORDER, "reason": "late"}))
    model.says("The refund was rejected.")
    model.says("Nobody approved the refund in time.")
    rejected = services.chat_send(user=requester, message=f"refund {REFUND_ORDER}")
    expired = services.chat_send(user=requester, message=f"refund {ORDER}")

    # an approver rejects the first (the resume runs on commit)
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=uuid.UUID(rejected.pending[0].confirmation_id), approver=approver1,
                                      reason="no photos of the damage")
    # nobody decides the second until it expires (the sweeper settles it; the resume runs on commit)
    request = ConfirmationRequest.objects.get(pk=expired.pending[0].confirmation_id)
    later = request.expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    with django_capture_on_commit_callbacks(execute=True):
        assert expiry.confirmations_expire() == [request.pk]

    rejected_answer = model.tool_answers(2)["call_rejected"]
    expired_answer = model.tool_answers(3)["call_expired"]
    assert (rejected_answer["success"], rejected_answer["code"]) == (False, "REJECTED")
    assert (expired_answer["success"], expired_answer["code"]) == (False, "CONFIRMATION_EXPIRED")
    assert "rejected" in rejected_answer["message"] and "in time" in expired_answer["message"]
    # the approver's reason and role reach the model
    assert "no photos of the damage" in rejected_answer["message"]
    assert rejected_answer["data"]["decided_by"] == {"role": "approver", "username": approver1.username,
    "name": approver1.username}  # no full name: the username
    for outcome in (rejected, expired):
        run = Run.objects.get(pk=outcome.run.pk)
        assert run.status == Run.Status.COMPLETED
        assert {k: len(v) for k, v in _answers_per_call(run).items()} == {outcome.pending[0].tool_call_id: 1}
    assert not Refund.objects.exists()
    assert ConfirmationRequest.objects.get(pk=request.pk).status == Status.EXPIRED


def _cancel_waiting(requester) -> tuple[Run, str]:
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    assert outcome.run.status == Run.Status.AWAITING_CONFIRMATION
    return outcome.run, outcome.pending[0].token


def test_tool_disabled_for_the_tenant_while_waiting_executes_nothing(requester):
    run, token = _cancel_waiting(requester)
    tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="cancel_order", enabled=False)

    done = services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                              confirmation_token=token)

    [[answer]] = _answers_per_call(done.run).values()
    # a policy denial, distinct from a tool that never existed
    assert (answer["success"], answer["code"]) == (False, "TOOL_DISABLED")
    assert _order_status(requester) == Order.Status.PAID and not Cancellation.objects.exists()
    assert not audit_rows(decision="EXECUTED")
    assert audit_rows(decision="DENIED", tool_name="cancel_order", status="TOOL_DISABLED")
    request = ConfirmationRequest.objects.get(run_id=run.pk)
    assert (request.status, request.outcome_code) == (Status.REFUSED, "TOOL_DISABLED")  # never left CONFIRMED
    assert done.run.status == Run.Status.COMPLETED


def test_use_tool_revoked_while_waiting_refuses_the_request_and_tells_the_model(requester):
    # One documented answer (docs/decisions.md): the confirm is committed and answered; the
    # consume-time refusal is the call's outcome, told to the model; the request ends REFUSED.
    run, token = _cancel_waiting(requester)
    remove_perm("tools.use_tool", requester, Tool.objects.get(name="cancel_order"))

    done = services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                              confirmation_token=token)

    [[answer]] = _answers_per_call(done.run).values()
    assert (answer["success"], answer["code"]) == (False, "PERMISSION_DENIED")
    assert done.run.status == Run.Status.COMPLETED
    assert _order_status(requester) == Order.Status.PAID and not Cancellation.objects.exists()
    assert not audit_rows(decision="EXECUTED")
    assert audit_rows(decision="DENIED", tool_name="cancel_order", status="PERMISSION_DENIED")
    request = ConfirmationRequest.objects.get(run_id=run.pk)
    assert (request.status, request.outcome_code) == (Status.REFUSED, "PERMISSION_DENIED")


def test_policy_changed_to_deny_while_waiting_executes_nothing(requester):
    run, token = _cancel_waiting(requester)
    Tool.objects.filter(name="cancel_order").update(policy_override=ApprovalPolicy.DENY)

    done = services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                              confirmation_token=token)

    [[answer]] = _answers_per_call(done.run).values()
    assert (answer["success"], answer["code"]) == (False, "POLICY_DENIED")
    assert _order_status(requester) == Order.Status.PAID and not Cancellation.objects.exists()
    assert ConfirmationRequest.objects.get(run_id=run.pk).status == Status.REFUSED


def test_the_same_cancel_twice_in_one_turn_cancels_once_and_answers_both(requester, model):
    model.calls(("call_a", "cancel_order", CANCEL_ARGS), ("call_b", "cancel_order", CANCEL_ARGS))
    model.says("Cancelled.")
    first = services.chat_send(user=requester, message=f"cancel {ORDER}, cancel {ORDER}")
    conversation = first.run.conversation_id

    for pending in first.pending:  # the requester confirms both cards with the tokens first shown
        services.chat_send(user=requester, message="yes", conversation_id=conversation,
                           confirmation_token=pending.token)

    answers = model.tool_answers(1)
    assert answers["call_a"] == answers["call_b"] and answers["call_a"]["success"] is True
    assert Cancellation.objects.count() == 1
    assert sorted(r.decision for r in audit_rows(tool_name="cancel_order")
                  if r.decision in ("EXECUTED", "IDEMPOTENT_HIT")) == ["EXECUTED", "IDEMPOTENT_HIT"]
