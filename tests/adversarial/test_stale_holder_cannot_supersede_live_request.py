"""A cancelled run's stale holder cannot supersede a live request.

When a run is stopped while its model call is in flight and the model then proposes a call on the
same order, the stale holder does not supersede the live run's half-approved request."""
from agentplatform.llm import client as llm_client  # the loop calls the model through it
import uuid
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import REFUND_ORDER


def test_cancelled_runs_stale_holder_supersedes_a_live_half_approved_request(transactional_db, requester, approver1,
                                                                            model, monkeypatch):
    model.calls(("v", "refund_order", {"order_id": REFUND_ORDER, "amount": "10", "reason": "broken parcel"}))
    live = services.chat_send(user=requester, message="refund 10")
    rid = uuid.UUID(live.pending[0].confirmation_id)
    approver_actions.confirmation_approve(request_id=rid, approver=approver1)
    model.calls(("s", "refund_order", {"order_id": REFUND_ORDER, "amount": "20", "reason": "broken parcel"}))
    model.says("the live run is told")
    real = llm_client.complete

    def stop_meanwhile(**kw):
        turn = real(**kw)
        if len(kw["messages"]) and kw["messages"][-1].get("content") == "second thoughts":
            services.run_cancel(run_id=Run.objects.order_by("-created_at").first().pk, actor=requester)
        return turn

    monkeypatch.setattr(llm_client, "complete", stop_meanwhile)
    services.chat_send(user=requester, message="second thoughts", conversation_id=live.run.conversation_id)
    rows = [(r.run_id == live.run.pk, r.status, Run.objects.get(pk=r.run_id).status) for r in ConfirmationRequest.objects.order_by("created_at")]
    print("requests (is_live_run, status, run status):", rows)
    assert ConfirmationRequest.objects.get(pk=rid).status != "SUPERSEDED", \
        "a cancelled run's stale holder superseded a live, half-approved request"
