"""Recovery after a worker died between the consuming commit and saving the run's state.

The call did run; when an operator then disables or denies the tool, the recovered run still
tells the model the truth (the call succeeded) instead of reporting it as refused."""
import datetime
import json

import pytest

from core import clock
from agentplatform.runtime import claims, services
from agentplatform.runtime.step import Step
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tests.tools.support import ORDER
from tools.catalog.models import Cancellation, Order
from tools.models import Tool
from tools.services import tenant_tool_set_enabled


class Killed(BaseException):
    pass


def _answers(run_id):
    out = {}
    for m in Run.objects.get(pk=run_id).state["messages"]:
        if m["role"] == "tool":
            out.setdefault(m["tool_call_id"], []).append(json.loads(m["content"]))
    return out


@pytest.mark.parametrize("change", ["tenant_disable", "global_disable", "deny"])
def test_recovered_run_reports_an_executed_call_as_refused(transactional_db, requester, monkeypatch, change):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [p] = first.pending
    real_save = Step.save_run

    def die_after_commit(step, *fields, **kw):
        run = step.held.run
        if run.state.get("pending") == {} and "status" in fields and run.status == Run.Status.RUNNING:
            raise Killed()  # the worker is killed right after the cancel committed
        return real_save(step, *fields, **kw)

    monkeypatch.setattr(Step, "save_run", die_after_commit)
    with pytest.raises(Killed):
        services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                           confirmation_token=p.token)
    monkeypatch.setattr(Step, "save_run", real_save)
    assert Cancellation.objects.count() == 1
    req = ConfirmationRequest.objects.get(pk=p.confirmation_id)
    print("request after crash", req.status, req.outcome_code)
    # an operator reacts to the incident by switching the tool off
    if change == "tenant_disable":
        tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="cancel_order", enabled=False)
    elif change == "global_disable":
        Tool.objects.filter(name="cancel_order").update(enabled=False)
    else:
        Tool.objects.filter(name="cancel_order").update(policy_override="DENY")
    Run.objects.filter(pk=first.run.pk).update(lease_expires_at=clock.now() - datetime.timedelta(seconds=1))
    claims.run_recover(run_id=first.run.pk)
    ans = _answers(first.run.pk)
    req.refresh_from_db()
    print(change, "request", req.status, req.outcome_code, "model told", {k: [(a["code"], a["message"][:80]) for a in v] for k, v in ans.items()})
    print("order", Order.objects.get(tenant=requester.tenant, order_id=ORDER).status)
    [[told]] = ans.values()
    assert told["success"], "the cancel ran (order CANCELLED) but the model is told it did not"
