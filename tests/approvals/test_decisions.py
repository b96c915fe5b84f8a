"""Every human decision carried out exactly as it was made (docs/decisions.md).

Each test builds its state through the services with the offline model (or the scripted model at
the HTTP edge), decides as people would, and asserts what executed (database rows), what the model
was told, what the requester sees (run API) and what the audit trail says. The resume runs eagerly
on commit (no broker), as in the embedded default.
"""
from __future__ import annotations

import datetime
import json
import uuid
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm, remove_perm
from rest_framework.test import APIClient

from core import clock
from agentplatform.runtime import services
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.tenancy.models import User
from approvals import approver_actions, expiry, requester_actions
from approvals.errors import ConfirmationAlreadyDecided
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.tools.support import CANCEL_ARGS, ORDER, REFUND_ORDER, SHIPPED_ORDER, model  # noqa: F401 - fixture
from tools.catalog.models import Cancellation, Order, Refund
from tools.models import IdempotencyRecord, RiskLevel, Tool

Status = ConfirmationRequest.Status


def _answers(run_id) -> dict[str, list[dict]]:
    """tool_call_id -> every tool message the run's model was given for it (decoded)."""
    answers: dict[str, list[dict]] = {}
    for m in Run.objects.get(pk=run_id).state["messages"]:
        if m["role"] == "tool":
            answers.setdefault(m["tool_call_id"], []).append(json.loads(m["content"]))
    return answers


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _approver(requester, name: str) -> User:
    """A further approver of the requester's tenant holding approve_tool on every tool."""
    user = User.objects.create(username=name, tenant=requester.tenant)
    for row in Tool.objects.all():
        assign_perm("tools.approve_tool", user, row)
    return user


def _refund(requester, *, amount: str, order: str = REFUND_ORDER, conversation_id=None):
    outcome = services.chat_send(user=requester, conversation_id=conversation_id,
                                 message=f"refund {order} amount {amount} because the parcel arrived broken")
    [pending] = outcome.pending
    return outcome, uuid.UUID(pending.confirmation_id)


# -- 1-3: decisions re-evaluated at consume time ---------------------------------------------------

def test_risk_raised_to_critical_after_the_request_sends_it_back_to_approvers(requester, approver1, approver2,
                                                                             django_capture_on_commit_callbacks):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [pending] = first.pending
    assert pending.needs == "requester"
    Tool.objects.filter(name="cancel_order").update(risk_override=RiskLevel.CRITICAL)

    # the requester confirms with the old token: nothing runs, the call waits for 2 approvers
    answer = services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                                confirmation_token=pending.token)

    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.policy, request.quorum, request.token_hash) == (Status.PENDING, "APPROVERS", 2, None)
    assert answer.run.status == Run.Status.AWAITING_CONFIRMATION
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == "PAID"
    assert not AuditEvent.objects.filter(tool_name="cancel_order", decision="EXECUTED").exists()
    regated = AuditEvent.objects.get(confirmation_id=request.pk, status="REGATED")
    assert "2 approver" in regated.message
    # the requester is told why it waits again (event and run API)
    event = answer.run.events.filter(type=RunEvent.Type.CONFIRMATION_REQUIRED).order_by("-seq").first()
    assert event.payload["needs"] == "approvers" and "stricter after you confirmed" in event.payload["reason"]
    assert event.payload["regated"] == {
        "cause": "APPROVERS_NOW", "tool": "cancel_order", "quorum": 2, "approvals": 0,
        "message": "The policy of cancel_order became stricter after you confirmed: it now needs 2 approvers "
                   "(risk CRITICAL). Your request is waiting for them.",
        "message_zh": "您确认后 cancel_order 的策略变得更严格：现在需要 2 位审批人（风险 CRITICAL），您的请求正在等待审批。"}
    mine = _api(requester).get("/api/v1/my-requests/").json()["results"]
    assert [(r["id"], r["status"], r["needs"], r["regated"]["message"]) for r in mine] == [
        (str(request.pk), "PENDING", "approvers", event.payload["reason"])]
    body = _api(requester).get(f"/api/v1/runs/{answer.run.pk}/").json()
    assert [(p["confirmation_id"], p["needs"], p["quorum"]) for p in body["pending"]] == [(str(request.pk), "approvers", 2)]

    # two approvers approve: it runs once, under the policy in force
    for approver in (approver1, approver2):
        with django_capture_on_commit_callbacks(execute=True):
            approver_actions.confirmation_approve(request_id=request.pk, approver=approver)
    assert Cancellation.objects.count() == 1
    executed = AuditEvent.objects.get(tool_name="cancel_order", decision="EXECUTED")
    assert executed.policy_decision == "APPROVERS"
    assert Run.objects.get(pk=first.run.pk).status == Run.Status.COMPLETED


def test_quorum_raised_while_approving_is_the_quorum_counted_at_consume(requester, approver1, approver2,
                                                                      django_capture_on_commit_callbacks):
    third = _approver(requester, "acme-approver3")  # held before the request: their decision counts
    outcome, request_id = _refund(requester, amount="10")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    Tool.objects.filter(name="refund_order").update(quorum=3)

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request_id, approver=approver2)

    # 2 of 3 now: nothing paid, waiting again with both approvals still counting
    assert not Refund.objects.exists()
    request = ConfirmationRequest.objects.get(pk=request_id)
    assert (request.status, request.quorum) == (Status.PENDING, 3)
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.AWAITING_CONFIRMATION
    # the requester is told, in both languages, that 2 of the 3 approvals count
    event = RunEvent.objects.filter(run_id=outcome.run.pk, type=RunEvent.Type.CONFIRMATION_REQUIRED).order_by("-seq")[0]
    assert {k: event.payload["regated"][k] for k in ("cause", "quorum", "approvals")} == {
        "cause": "QUORUM_RAISED", "quorum": 3, "approvals": 2}
    assert "it now needs 3 approvers and 2 of them count so far" in event.payload["regated"]["message"]
    assert "现在需要 3 位审批人，目前 2 位有效" in event.payload["regated"]["message_zh"]
    assert request.decision_reason == event.payload["reason"]
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request_id, approver=third)
    assert [r.amount for r in Refund.objects.all()] == [Decimal("10.00")]
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.COMPLETED


def test_an_approver_who_lost_approve_tool_is_not_counted_at_consume(requester, approver1, approver2,
                                                                    django_capture_on_commit_callbacks):
    outcome, request_id = _refund(requester, amount="10")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    # approver1's standing lapses: no longer in the approvers group
    approver1.groups.clear()
    approver1 = User.objects.get(pk=approver1.pk)  # fresh permission cache

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request_id, approver=approver2)

    assert not Refund.objects.exists()
    request = ConfirmationRequest.objects.get(pk=request_id)
    assert request.status == Status.PENDING and "Only 1 of the 2 approvals" in request.decision_reason
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.AWAITING_CONFIRMATION
    event = RunEvent.objects.filter(run_id=outcome.run.pk, type=RunEvent.Type.CONFIRMATION_REQUIRED).order_by("-seq")[0]
    assert {k: event.payload["regated"][k] for k in ("cause", "quorum", "approvals")} == {
        "cause": "APPROVALS_LAPSED", "quorum": 2, "approvals": 1}
    assert "只有 1 位仍然有效" in event.payload["regated"]["message_zh"]


def test_a_looser_policy_never_lowers_what_was_already_asked(requester, approver1,
                                                            django_capture_on_commit_callbacks):
    outcome, request_id = _refund(requester, amount="10")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    # the operator lowers refund_order to HIGH (requester confirmation) meanwhile
    Tool.objects.filter(name="refund_order").update(risk_override=RiskLevel.HIGH)

    # the one approval does not make it run: it was asked of two approvers
    assert not Refund.objects.exists()
    assert ConfirmationRequest.objects.get(pk=request_id).status == Status.PENDING
    assert services.run_continue(run_id=outcome.run.pk) is None


def test_a_requester_who_lost_the_tools_permission_is_refused_at_consume(requester):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [pending] = first.pending
    requester.user_permissions.remove(Permission.objects.get(codename="cancel_order"))
    requester = User.objects.get(pk=requester.pk)

    answer = services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                                confirmation_token=pending.token)

    [[result]] = _answers(answer.run.pk).values()
    assert (result["success"], result["code"]) == (False, "PERMISSION_DENIED")
    assert not Cancellation.objects.exists()
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == Status.REFUSED


# -- 4: who decided and why reaches the model and the requester ------------------------------------

def test_rejection_reason_and_approve_comments_reach_the_model_and_the_requester(requester, approver1, approver2,
                                                                                django_capture_on_commit_callbacks):
    outcome, request_id = _refund(requester, amount="10")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1, comment="amount matches the invoice")
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=request_id, approver=approver2, reason="fraud suspected")

    [[answer]] = _answers(outcome.run.pk).values()
    assert answer["code"] == "REJECTED"
    assert "fraud suspected" in answer["message"] and "approver" in answer["message"]
    assert answer["data"]["decided_by"] == {"role": "approver", "username": approver2.username,
    "name": approver2.username}  # no full name: the username
    # the requester's card (event) and the run API say the same, with the approve comment too
    event = Run.objects.get(pk=outcome.run.pk).events.get(type=RunEvent.Type.TOOL_EXECUTION_COMPLETED)
    assert (event.payload["reason"], event.payload["decided_by"]["username"]) == ("fraud suspected", approver2.username)
    [decision] = _api(requester).get(f"/api/v1/runs/{outcome.run.pk}/").json()["decisions"]
    assert decision["status"] == "CANCELLED" and decision["reason"] == "fraud suspected"
    assert decision["decided_by"] == {"role": "approver", "username": approver2.username}
    assert [(a["approver"], a["decision"], a["comment"]) for a in decision["approvals"]] == [
        (approver1.username, "APPROVE", "amount matches the invoice"),
        (approver2.username, "REJECT", "fraud suspected")]
    assert not Refund.objects.exists()


# -- 5: a confirmed call is never relabelled ----------------------------------------------------------

def test_a_confirmed_call_runs_when_its_turn_settles_and_is_never_relabelled_expired(
        requester, model, monkeypatch, django_capture_on_commit_callbacks):
    model.calls(("call_a", "cancel_order", CANCEL_ARGS),
                ("call_b", "cancel_order", {"order_id": REFUND_ORDER, "reason": "duplicate order"}))
    model.says("A was cancelled; B expired.")
    first = services.chat_send(user=requester, message="cancel both")
    tokens = {p.tool_call_id: p for p in first.pending}

    requester_actions.confirmation_confirm(token=tokens["call_a"].token, user=requester)
    b = ConfirmationRequest.objects.get(pk=tokens["call_b"].confirmation_id)
    monkeypatch.setattr(clock, "now", lambda: b.expires_at + datetime.timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        expired = expiry.confirmations_expire()

    assert expired == [b.pk]  # only the undecided call expires
    a = ConfirmationRequest.objects.get(pk=tokens["call_a"].confirmation_id)
    assert (a.status, a.outcome_code) == (Status.CONSUMED, "OK")
    assert not AuditEvent.objects.filter(confirmation_id=a.pk, decision="EXPIRED").exists()
    answers = model.tool_answers(1)
    assert (answers["call_a"]["success"], answers["call_a"]["code"]) == (True, "OK")
    assert answers["call_b"]["code"] == "CONFIRMATION_EXPIRED"
    assert Cancellation.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == "CANCELLED"


# -- 6: one request per distinct call of a turn -----------------------------------------------------

def test_identical_gated_calls_in_one_turn_ask_the_human_once(requester, model):
    model.calls(("call_a", "cancel_order", CANCEL_ARGS), ("call_b", "cancel_order", CANCEL_ARGS))
    model.says("Cancelled.")
    first = services.chat_send(user=requester, message="cancel it twice")

    assert len(first.pending) == 1 and ConfirmationRequest.objects.count() == 1
    assert set(Run.objects.get(pk=first.run.pk).state["pending"]) == {"call_a", "call_b"}
    services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                       confirmation_token=first.pending[0].token)

    answers = model.tool_answers(1)
    assert answers["call_a"]["success"] and answers["call_a"] == answers["call_b"]
    assert Cancellation.objects.count() == 1


# -- 7: a newer intent supersedes the older pending one ---------------------------------------------

def test_a_newer_refund_supersedes_the_older_one(requester, approver1, approver2, django_capture_on_commit_callbacks):
    old, old_id = _refund(requester, amount="10")
    approver_actions.confirmation_approve(request_id=old_id, approver=approver1)

    with django_capture_on_commit_callbacks(execute=True):
        new, new_id = _refund(requester, amount="20", conversation_id=old.run.conversation_id)

    stored = ConfirmationRequest.objects.get(pk=old_id)
    assert stored.status == Status.SUPERSEDED and str(new_id) in AuditEvent.objects.get(
        confirmation_id=old_id, status="SUPERSEDED").message
    with pytest.raises(ConfirmationAlreadyDecided):
        approver_actions.confirmation_approve(request_id=old_id, approver=approver2)
    # the old run was told, truthfully
    [[told]] = _answers(old.run.pk).values()
    assert told["code"] == "SUPERSEDED"
    assert Run.objects.get(pk=old.run.pk).status == Run.Status.COMPLETED
    # only the latest intent is approvable, and it pays once
    for approver in (approver1, approver2):
        with django_capture_on_commit_callbacks(execute=True):
            approver_actions.confirmation_approve(request_id=new_id, approver=approver)
    assert [r.amount for r in Refund.objects.all()] == [Decimal("20.00")]
    assert ConfirmationRequest.objects.get(pk=new_id).status == Status.CONSUMED


def test_a_consume_that_meets_an_idempotency_conflict_is_refused_not_consumed(requester, approver1, approver2,
                                                                             django_capture_on_commit_callbacks):
    outcome, request_id = _refund(requester, amount="10")
    request = ConfirmationRequest.objects.get(pk=request_id)
    # the same business key was used meanwhile with other arguments (e.g. a direct call)
    IdempotencyRecord.objects.create(tenant_id=requester.tenant_id, key=request.idempotency_key,
                                     tool_name="refund_order", arguments_hash="0" * 64, status="SUCCEEDED",
                                     result={"success": True, "code": "OK", "message": "OK"}, locked_at=clock.now())
    for approver in (approver1, approver2):
        with django_capture_on_commit_callbacks(execute=True):
            approver_actions.confirmation_approve(request_id=request_id, approver=approver)

    request.refresh_from_db()
    assert (request.status, request.outcome_code) == (Status.REFUSED, "IDEMPOTENCY_CONFLICT")
    assert not Refund.objects.exists()
    [[told]] = _answers(outcome.run.pk).values()
    assert told["code"] == "IDEMPOTENCY_CONFLICT"


# -- 8: a call that cannot succeed never costs a human's attention ----------------------------------

def test_cancelling_a_shipped_order_is_answered_before_any_human_is_asked(requester):
    outcome = services.chat_send(user=requester, message=f"cancel {SHIPPED_ORDER} because it is late")

    assert outcome.pending == [] and not ConfirmationRequest.objects.exists()
    [[result]] = _answers(outcome.run.pk).values()
    assert result["code"] == "ORDER_NOT_CANCELLABLE"
    assert AuditEvent.objects.filter(tool_name="cancel_order", decision="REFUSED",
                                     status="ORDER_NOT_CANCELLABLE").exists()


def test_a_refund_above_the_refundable_remainder_is_answered_before_any_human_is_asked(requester):
    outcome = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 99999 because broken")

    assert outcome.pending == [] and not ConfirmationRequest.objects.exists()
    [[result]] = _answers(outcome.run.pk).values()
    assert result["code"] == "REFUND_EXCEEDS_AMOUNT"


def test_the_precheck_runs_again_at_execution(requester):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [pending] = first.pending
    Order.objects.filter(tenant=requester.tenant, order_id=ORDER).update(status="SHIPPED")

    answer = services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                                confirmation_token=pending.token)

    [[result]] = _answers(answer.run.pk).values()
    assert result["code"] == "ORDER_NOT_CANCELLABLE"
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.outcome_code) == (Status.REFUSED, "ORDER_NOT_CANCELLABLE")
    assert not Cancellation.objects.exists()


# -- 9: expiry settles without beat ------------------------------------------------------------------

def test_reading_the_run_after_the_deadline_settles_it_and_the_run_resumes(transactional_db, requester, monkeypatch):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    request = ConfirmationRequest.objects.get(pk=first.pending[0].confirmation_id)
    monkeypatch.setattr(clock, "now", lambda: request.expires_at + datetime.timedelta(seconds=1))

    body = _api(requester).get(f"/api/v1/runs/{first.run.pk}/").json()

    assert body["status"] == "COMPLETED" and body["pending"] == []
    assert ConfirmationRequest.objects.get(pk=request.pk).status == Status.EXPIRED
    [[result]] = _answers(first.run.pk).values()
    assert result["code"] == "CONFIRMATION_EXPIRED"


# -- 10: a run can be cancelled ------------------------------------------------------------------------

def test_the_requester_cancels_a_waiting_run_through_the_api(requester, outsider, acme_admin):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    url = f"/api/v1/runs/{first.run.pk}/cancel/"

    assert _api(outsider).post(url, {}, format="json").status_code == 404  # another tenant
    response = _api(requester).post(url, {"reason": "changed my mind"}, format="json")

    assert response.status_code == 200 and response.json()["status"] == "CANCELLED"
    request = ConfirmationRequest.objects.get(pk=first.pending[0].confirmation_id)
    assert (request.status, request.outcome_code) == (Status.CANCELLED, "RUN_ENDED")
    assert AuditEvent.objects.filter(run_id=first.run.pk, status="RUN_CANCELLED", actor=requester).exists()
    assert Run.objects.get(pk=first.run.pk).events.order_by("-seq").first().payload["status"] == "CANCELLED"
    # the token no longer runs anything, and a second cancel is a clear conflict
    with pytest.raises(ConfirmationAlreadyDecided):
        requester_actions.confirmation_confirm(token=first.pending[0].token, user=requester)
    again = _api(acme_admin).post(url, {}, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "RUN_FINISHED")
    assert not Cancellation.objects.exists()


def test_a_cancelled_running_run_cannot_execute_through_its_stale_holder(requester):
    from agentplatform.runtime import leases
    from agentplatform.runtime.context import build_tool_context
    from tools.context import FenceLost

    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    run = Run.objects.get(pk=first.run.pk)
    # a holder claims the run, then the run is cancelled under it
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, lease_expires_at=leases.new_lease())
    run.refresh_from_db()
    ctx = build_tool_context(run)
    services.run_cancel(run_id=run.pk, actor=requester)

    with pytest.raises(FenceLost):
        ctx.fence()


# -- 12: permissions re-checked before every model call ----------------------------------------------

def test_a_grant_revoked_between_two_model_calls_of_a_run_is_in_force_for_the_next(requester, model, monkeypatch):
    from agentplatform.llm import client as llm  # the loop's model calls go through llm.complete

    model.calls(("call_list", "list_orders", {}))
    model.calls(("call_inv", "query_inventory", {"sku": "SKU-10001"}))
    model.says("done")
    inventory = Tool.objects.get(name="query_inventory")
    real_complete, seen = llm.complete, []

    def revoke_before_the_second_call(**kwargs):
        seen.append(kwargs)
        turn = real_complete(**kwargs)
        if len(seen) == 1:  # after the first model call answered, before the second is made
            remove_perm("tools.use_tool", requester, inventory)
        return turn

    monkeypatch.setattr(llm, "complete", revoke_before_the_second_call)
    with pytest.raises(Exception) as raised:
        services.chat_send(user=requester, message="list orders then stock")

    assert getattr(raised.value, "code", "") == "PERMISSION_DENIED"
    # the second model request no longer offered the revoked tool, and its call did not execute
    offered = [t["function"]["name"] for t in model.requests[1].body["tools"]]
    assert "query_inventory" not in offered and "list_orders" in offered
    assert not AuditEvent.objects.filter(tool_name="query_inventory", decision="EXECUTED").exists()
