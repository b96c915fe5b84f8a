"""A run stopped while the model is thinking, and a model that reuses one tool_call_id.

A Stop that lands during a model call leaves no request open (PENDING or CONFIRMED) on the
cancelled run, so approvers are never asked to decide for a run that is gone. When the untrusted
model gives two calls of one turn the same id (two gated calls, or a read-only and a gated one),
no decision is lost and every call id is answered exactly once."""
from agentplatform.llm import client as llm_client  # the loop calls the model through it
import json

from rest_framework.test import APIClient

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, REFUND_ORDER
from tools.catalog.models import Cancellation

S = ConfirmationRequest.Status


def _api(u):
    c = APIClient(); c.force_authenticate(u); return c


def _answers(run_id):
    out = {}
    for m in Run.objects.get(pk=run_id).state["messages"]:
        if m["role"] == "tool":
            out.setdefault(m["tool_call_id"], []).append(json.loads(m["content"]))
    return out


def test_stop_during_model_call_leaves_open_request_on_cancelled_run(transactional_db, requester, approver1, approver2, model,
                                                                   monkeypatch, django_capture_on_commit_callbacks):
    """User clicks Stop while the model is thinking; the model then proposes a gated refund."""
    model.calls(("c1", "refund_order", {"order_id": REFUND_ORDER, "amount": "10", "reason": "broken parcel"}))
    real = llm_client.complete

    def stop_meanwhile(**kw):
        turn = real(**kw)
        services.run_cancel(run_id=Run.objects.get().pk, actor=requester, reason="stop")
        return turn

    monkeypatch.setattr(llm_client, "complete", stop_meanwhile)
    out = services.chat_send(user=requester, message="refund please")
    run = Run.objects.get()
    print("run", run.status, "pending out", out.pending)
    reqs = list(ConfirmationRequest.objects.all())
    print([(r.status, r.outcome_code) for r in reqs])
    # approvers still asked?
    listed = _api(approver1).get("/api/v1/approvals/").json()
    print("approver queue", listed["count"])
    if reqs and reqs[0].status == S.PENDING:
        for a in (approver1, approver2):
            with django_capture_on_commit_callbacks(execute=True):
                r = _api(a).post(f"/api/v1/approvals/{reqs[0].pk}/approve/", {}, format="json")
                print(a.username, r.status_code, r.json().get("status"))
    reqs = list(ConfirmationRequest.objects.all())
    print("after", [(r.status, r.outcome_code) for r in reqs], Run.objects.get().status)
    print("events", [(e.seq, e.type) for e in Run.objects.get().events.order_by("seq")])
    assert all(r.status not in (S.PENDING, S.CONFIRMED) for r in reqs), "open request on a CANCELLED run"


def test_duplicate_tool_call_ids_in_one_turn(requester, model, django_capture_on_commit_callbacks):
    """The model (untrusted) reuses one tool_call_id for two different gated calls."""
    model.calls(("dup", "cancel_order", CANCEL_ARGS),
                ("dup", "cancel_order", {"order_id": REFUND_ORDER, "reason": "duplicate order"}))
    model.says("ok")
    model.says("ok2")
    first = services.chat_send(user=requester, message="cancel two")
    print("pending", [(p.tool_call_id, p.confirmation_id) for p in first.pending])
    print("state pending", Run.objects.get().state["pending"])
    for p in first.pending:
        try:
            services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                               confirmation_token=p.token)
        except Exception as e:
            print("confirm err", type(e).__name__, e)
    reqs = list(ConfirmationRequest.objects.order_by("created_at"))
    print([(r.tool_call_id, r.status, r.outcome_code) for r in reqs], Run.objects.get().status)
    print("answers", {k: [a["code"] for a in v] for k, v in _answers(first.run.pk).items()})
    print("cancellations", Cancellation.objects.count())
    run = Run.objects.get()
    assert not (run.is_finished and any(r.status in (S.PENDING, S.CONFIRMED) for r in reqs)), \
        "a decision lost: request left open on a finished run"
    assert all(len(v) == 1 for v in _answers(first.run.pk).values()), "a call id answered twice"


def test_duplicate_id_readonly_and_gated(requester, model):
    """Same id for a read-only call and a gated call: the id gets two tool messages?"""
    model.calls(("dup", "list_orders", {}), ("dup", "cancel_order", CANCEL_ARGS))
    model.says("ok")
    first = services.chat_send(user=requester, message="x")
    services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                       confirmation_token=first.pending[0].token)
    ans = _answers(first.run.pk)
    print({k: [a["code"] for a in v] for k, v in ans.items()})
    print("model saw", [ (m["role"], m.get("tool_call_id")) for m in model.messages(1)])
    assert all(len(v) == 1 for v in ans.values())
