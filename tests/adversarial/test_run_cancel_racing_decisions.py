"""Real threads on PostgreSQL: run cancel racing a decision."""
import time
import uuid

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions, requester_actions
from audit import events as audit_events
from approvals.models import ConfirmationRequest
from tests.tools.support import ORDER, REFUND_ORDER, race
from tools.catalog.models import Refund, Cancellation

S = ConfirmationRequest.Status
pytestmark = pytest.mark.postgres


def _slow_audit(monkeypatch, decisions):
    real = audit_events._request_event

    def slow(decision, request, **kw):
        row = real(decision, request, **kw)
        if decision in decisions:
            time.sleep(0.6)  # the decision's transaction is still open (widens the window only)
        return row

    monkeypatch.setattr(audit_events, "_request_event", slow)


def test_cancel_racing_the_quorum_approval(transactional_db, requester, approver1, approver2, monkeypatch):
    out = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because the parcel arrived broken")
    rid = uuid.UUID(out.pending[0].confirmation_id)
    approver_actions.confirmation_approve(request_id=rid, approver=approver1)
    _slow_audit(monkeypatch, {"APPROVED"})

    def act(i):
        if i == 0:
            return approver_actions.confirmation_approve(request_id=rid, approver=approver2).status
        time.sleep(0.2)
        return services.run_cancel(run_id=out.run.pk, actor=requester, reason="stop").status

    results = race(2, lambda i: i, act)
    req = ConfirmationRequest.objects.get(pk=rid)
    run = Run.objects.get(pk=out.run.pk)
    print("results", results, "| run", run.status, "| request", req.status, req.outcome_code, "| refunds", Refund.objects.count())
    assert not (run.status in ("CANCELLED", "FAILED", "COMPLETED") and req.status in (S.PENDING, S.CONFIRMED))


def test_cancel_racing_the_requester_confirm(transactional_db, requester, monkeypatch):
    out = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [p] = out.pending
    _slow_audit(monkeypatch, {"CONFIRMED"})

    def act(i):
        if i == 0:
            return requester_actions.confirmation_confirm(token=p.token, user=requester).status
        time.sleep(0.2)
        return services.run_cancel(run_id=out.run.pk, actor=requester, reason="stop").status

    results = race(2, lambda i: i, act)
    req = ConfirmationRequest.objects.get(pk=p.confirmation_id)
    run = Run.objects.get(pk=out.run.pk)
    print("results", results, "| run", run.status, "| request", req.status, req.outcome_code, "| cancellations", Cancellation.objects.count())
    assert not (run.status in ("CANCELLED", "FAILED", "COMPLETED") and req.status in (S.PENDING, S.CONFIRMED))
