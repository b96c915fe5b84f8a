"""Concurrent confirms, resumes and approvals execute a call once, with real threads on PostgreSQL.

A double-clicked confirm racing the recovery sweep's resume cancels the order once and answers
each call id once; three approvers racing for a quorum of two refund once."""
import json
import uuid

import pytest

from agentplatform.runtime import claims, services
from agentplatform.runtime.models import Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, REFUND_ORDER, race
from tools.catalog.models import Cancellation, Refund

pytestmark = pytest.mark.postgres


def _answers(run_id):
    out = {}
    for m in Run.objects.get(pk=run_id).state["messages"]:
        if m["role"] == "tool":
            out.setdefault(m["tool_call_id"], []).append(json.loads(m["content"]))
    return out


def test_double_click_and_sweep(transactional_db, requester, model):
    model.calls(("a", "cancel_order", CANCEL_ARGS), ("b", "cancel_order", CANCEL_ARGS))
    model.says("done")
    model.says("done again")
    first = services.chat_send(user=requester, message="cancel it")
    [p] = first.pending

    def act(i):
        if i < 2:
            return services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                                      confirmation_token=p.token).run.status
        return claims.run_resume(run_id=first.run.pk)

    results = race(3, lambda i: i, act)
    print("results", [type(r).__name__ if isinstance(r, BaseException) else r for r in results])
    ans = _answers(first.run.pk)
    print("answers", {k: [a["code"] for a in v] for k, v in ans.items()}, "cancellations", Cancellation.objects.count(),
          "run", Run.objects.get(pk=first.run.pk).status)
    assert Cancellation.objects.count() == 1 and all(len(v) == 1 for v in ans.values())


def test_concurrent_approvals_three_approvers_quorum_two(transactional_db, requester, approver1, approver2, people):
    from agentplatform.tenancy.models import User
    from guardian.shortcuts import assign_perm
    from tools.models import Tool
    a3 = User.objects.create(username="acme-approver3", tenant=requester.tenant)
    for t in Tool.objects.all():
        assign_perm("tools.approve_tool", a3, t)
    out = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because the parcel arrived broken")
    rid = uuid.UUID(out.pending[0].confirmation_id)
    approvers = [approver1, approver2, a3]
    results = race(3, lambda i: approvers[i], lambda a: approver_actions.confirmation_approve(request_id=rid, approver=a).status)
    print("results", [type(r).__name__ if isinstance(r, BaseException) else str(r) for r in results])
    print("refunds", Refund.objects.count(), "req", ConfirmationRequest.objects.get(pk=rid).status,
          "run", Run.objects.get(pk=out.run.pk).status, "answers", {k: [a["code"] for a in v] for k, v in _answers(out.run.pk).items()})
    assert Refund.objects.count() == 1
