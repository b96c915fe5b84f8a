"""The kill switch: a stop denies new calls of a tool with TOOL_STOPPED, cancels its requests still
to run (their runs tell the model why), refuses a decision of it at consume time, and only a
separate, audited release lifts it; a tenant's stop stays in its tenant, an operator's holds in
every tenant."""
from __future__ import annotations

import json
import uuid

import pytest
from django.core import mail

from agentplatform.runtime import resume, services
from agentplatform.runtime.models import Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from approvals.selectors import outcome_of
from audit.models import AuditEvent
from core import clock
from core.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from policies.kill_switch import (ToolAlreadyStopped, ToolNotStopped, active_stop, kill_switch_engage,
                                  kill_switch_release, kill_switch_release_tool, visible_stops)
from policies.models import KillSwitch
from tests.policies.support import call
from tests.tools.support import GLOBEX_ORDER, REFUND_ORDER, race

pytestmark = pytest.mark.django_db

S = ConfirmationRequest.Status
OTHER_PAID_ORDER = "A202607290001"
REFUND = {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"}


def _told(run_id) -> list[dict]:
    """The tool messages of the run, parsed."""
    return [json.loads(m["content"]) for m in Run.objects.get(pk=run_id).state["messages"] if m["role"] == "tool"]


def _stop_rows(**where) -> list[AuditEvent]:
    """The CONTROL_CHANGE audit rows of kill switches matching `where`, oldest first."""
    rows = AuditEvent.objects.filter(decision="CONTROL_CHANGE", **where).order_by("occurred_at")
    return [r for r in rows if ((r.masked_arguments or {}).get("object") or {}).get("type") == "kill_switch"]


def _refund_waiting(requester, order: str = REFUND_ORDER):
    outcome = services.chat_send(user=requester, message=f"Refund order {order} because it arrived damaged")
    assert outcome.pending and outcome.pending[0].needs == "approvers"
    return outcome, uuid.UUID(outcome.pending[0].confirmation_id)


def test_a_stop_denies_new_calls_with_tool_stopped_and_the_reason(requester, acme_admin):
    kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="refunds double-paid since 09:00")
    outcome = call(requester, "refund_order", REFUND)
    assert outcome.pending is None and outcome.result.code == "TOOL_STOPPED"
    assert "refunds double-paid since 09:00" in outcome.result.message and "已被管理员停用" in outcome.result.message
    assert not ConfirmationRequest.objects.filter(tool_name="refund_order").exists()
    row = AuditEvent.objects.get(tool_call_id="call_1", decision="DENIED")
    assert row.tool_name == "refund_order"
    # Another tool of the same tenant is untouched.
    assert call(requester, "list_orders", {}, call_id="call_2").result.success


def test_a_stop_cancels_pending_and_confirmed_requests_and_their_runs_tell_the_model(
        requester, approver1, approver2, acme_admin, django_capture_on_commit_callbacks):
    pending_run, pending_id = _refund_waiting(requester)
    confirmed_run, confirmed_id = _refund_waiting(requester, OTHER_PAID_ORDER)
    assert ConfirmationRequest.objects.get(pk=pending_id).status == S.PENDING
    # Decide the second one fully without resuming its run: CONFIRMED, waiting for its turn.
    approver_actions.confirmation_approve(request_id=confirmed_id, approver=approver1)
    approver_actions.confirmation_approve(request_id=confirmed_id, approver=approver2)
    assert ConfirmationRequest.objects.get(pk=confirmed_id).status == S.CONFIRMED
    with django_capture_on_commit_callbacks(execute=True):
        engaged = kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="payment provider incident")
    assert set(engaged.cancelled) == {pending_id, confirmed_id}
    for request_id, run in ((pending_id, pending_run.run), (confirmed_id, confirmed_run.run)):
        request = ConfirmationRequest.objects.get(pk=request_id)
        assert (request.status, request.outcome_code, request.decided_by_id) == (S.CANCELLED, "TOOL_STOPPED",
                                                                                 acme_admin.pk)
        assert request.decision_reason == "payment provider incident"
        assert outcome_of(request)["outcome"] == "CANCELLED"
        audit = AuditEvent.objects.get(confirmation_id=request_id, decision="CANCELLED")
        assert audit.status == "TOOL_STOPPED" and "payment provider incident" in audit.message
        answers = [a for a in _told(run.pk) if a.get("code") == "TOOL_STOPPED"]
        assert answers and "payment provider incident" in answers[0]["message"], _told(run.pk)
        assert Run.objects.get(pk=run.pk).status != Run.Status.AWAITING_CONFIRMATION


def test_a_confirmation_consumed_after_a_stop_is_refused_with_tool_stopped(requester, approver1, approver2):
    run, request_id = _refund_waiting(requester)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver2)
    # A stop that committed after this request escaped its sweep (as when it was confirmed meanwhile).
    KillSwitch.objects.create(tool_name="refund_order", tenant_id=requester.tenant_id, reason="ledger frozen",
                              engaged_at=clock.now())
    resume.resume_now(run_id=run.run.pk)
    request = ConfirmationRequest.objects.get(pk=request_id)
    assert (request.status, request.outcome_code) == (S.REFUSED, "TOOL_STOPPED")
    answers = [a for a in _told(run.run.pk) if a.get("code") == "TOOL_STOPPED"]
    assert answers and "ledger frozen" in answers[0]["message"]
    assert not AuditEvent.objects.filter(confirmation_id=request_id, decision="EXECUTED").exists()


def test_release_restores_the_gate_and_both_actions_are_audited(requester, acme_admin):
    engaged = kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="incident 42")
    assert call(requester, "refund_order", REFUND).result.code == "TOOL_STOPPED"
    released = kill_switch_release(stop_id=engaged.stop.pk, actor=acme_admin, reason="incident closed")
    assert (released.released_by_id, released.release_reason) == (acme_admin.pk, "incident closed")
    assert active_stop(requester.tenant_id, "refund_order") is None
    outcome = call(requester, "refund_order", REFUND, call_id="call_2")
    assert outcome.pending is not None  # gated as before: the registry's approvers
    rows = _stop_rows(tool_name="refund_order", tenant_id=requester.tenant_id)
    assert [(r.status, r.actor_id) for r in rows] == [("CREATED", acme_admin.pk), ("CHANGED", acme_admin.pk)]
    assert rows[0].masked_arguments["object"] == {"type": "kill_switch", "id": str(engaged.stop.pk)}
    assert "incident 42" in rows[0].message and "incident closed" in rows[1].message
    with pytest.raises(ToolNotStopped):
        kill_switch_release(stop_id=engaged.stop.pk, actor=acme_admin, reason="again")


def test_a_stop_already_in_force_is_a_conflict(acme_admin, operator):
    kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="first")
    with pytest.raises(ToolAlreadyStopped) as error:
        kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="second")
    assert "first" in error.value.message
    kill_switch_engage(tool_name="refund_order", actor=operator, reason="everywhere")  # another scope
    with pytest.raises(ToolAlreadyStopped):
        kill_switch_engage(tool_name="refund_order", actor=operator, reason="everywhere again")


def test_a_tenants_stop_stays_in_its_tenant(requester, outsider, acme_admin, globex_admin):
    engaged = kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="acme only")
    assert engaged.stop.tenant_id == requester.tenant_id
    assert call(outsider, "list_orders", {}).result.success
    assert active_stop(outsider.tenant_id, "refund_order") is None
    with pytest.raises(NotFoundError):
        kill_switch_release(stop_id=engaged.stop.pk, actor=globex_admin, reason="not mine")
    with pytest.raises(NotFoundError):
        kill_switch_engage(tool_name="cancel_order", actor=globex_admin, reason="x", tenant_id=requester.tenant_id)
    assert list(visible_stops(globex_admin)) == []
    assert list(visible_stops(acme_admin)) == [engaged.stop]
    assert not _stop_rows(tenant_id=outsider.tenant_id)


def test_an_operators_stop_holds_in_every_tenant_and_only_an_operator_releases_it(
        requester, outsider, acme_admin, operator):
    engaged = kill_switch_engage(tool_name="list_orders", actor=operator, reason="read replica broken")
    assert engaged.stop.tenant_id is None
    assert call(requester, "list_orders", {}).result.code == "TOOL_STOPPED"
    assert call(outsider, "list_orders", {}, call_id="call_2").result.code == "TOOL_STOPPED"
    audited = {r.tenant_id for r in _stop_rows(tool_name="list_orders")}
    assert {requester.tenant_id, outsider.tenant_id} <= audited
    with pytest.raises(ToolAlreadyStopped):  # already stopped here, by the operator
        kill_switch_engage(tool_name="list_orders", actor=acme_admin, reason="me too")
    with pytest.raises(PermissionDeniedError):
        kill_switch_release(stop_id=engaged.stop.pk, actor=acme_admin, reason="not yours")
    with pytest.raises(PermissionDeniedError):
        kill_switch_release_tool(tool_name="list_orders", actor=acme_admin, reason="not yours")
    kill_switch_release_tool(tool_name="list_orders", actor=operator, reason="replica back")
    assert call(requester, "list_orders", {}, call_id="call_3").result.success


def test_an_operators_stop_cancels_requests_of_every_tenant_and_no_other_tool(requester, outsider, operator):
    _, acme_id = _refund_waiting(requester)
    _, globex_id = _refund_waiting(outsider, GLOBEX_ORDER)
    other = call(requester, "cancel_order", {"order_id": OTHER_PAID_ORDER, "reason": "late"})
    assert other.pending is not None
    engaged = kill_switch_engage(tool_name="refund_order", actor=operator, reason="everywhere")
    assert set(engaged.cancelled) == {acme_id, globex_id}
    assert ConfirmationRequest.objects.get(pk=globex_id).status == S.CANCELLED
    assert ConfirmationRequest.objects.get(pk=other.pending.confirmation_id).status == S.PENDING


@pytest.mark.parametrize("reason", ["", "   ", None, "x" * 501])
def test_a_stop_needs_a_short_reason(acme_admin, reason):
    with pytest.raises(InvalidInputError):
        kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason=reason)
    assert not KillSwitch.objects.exists()


def test_only_administrators_stop_tools(requester):
    with pytest.raises(PermissionDeniedError):
        kill_switch_engage(tool_name="refund_order", actor=requester, reason="I do not like it")
    assert not KillSwitch.objects.exists()


@pytest.mark.postgres
def test_concurrent_stops_of_one_tool_leave_exactly_one_in_force(transactional_db, people):
    admin = people["acme"]["admin"]
    results = race(6, lambda i: i, lambda i: kill_switch_engage(tool_name="refund_order", actor=admin,
                                                                 reason=f"stop {i}"))
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1, results
    assert all(isinstance(r, ToolAlreadyStopped) for r in lost), lost
    assert KillSwitch.objects.filter(released_at__isnull=True).count() == 1
    assert len(_stop_rows(tool_name="refund_order")) == 1


def test_the_requester_of_a_cancelled_approval_is_told_why_by_email(requester, acme_admin,
                                                                   django_capture_on_commit_callbacks):
    _refund_waiting(requester)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="payment provider incident")
    assert [m.to for m in mail.outbox] == [[requester.email]]
    body = mail.outbox[0].body
    assert "Result / 结果: cancelled; nothing was done" in body and "Reason / 原因: payment provider incident" in body


def test_a_secret_pasted_into_the_reason_is_masked_before_anyone_reads_it(requester, acme_admin):
    engaged = kill_switch_engage(tool_name="refund_order", actor=acme_admin,
                                 reason="card 4111 1111 1111 1111 leaked in a refund")
    assert "4111 1111 1111 1111" not in engaged.stop.reason and "4111****1111" in engaged.stop.reason
    assert "4111 1111 1111 1111" not in call(requester, "refund_order", REFUND).result.message
    assert all("4111 1111 1111 1111" not in r.message for r in _stop_rows())
