"""A model that reuses one tool_call_id for two calls of a turn.

Each call gets an id of its own, so confirming one of two gated calls voids neither and both run
once; an ungated write that ran before the turn paused is not run again when the run resumes."""
import json

from pydantic import BaseModel, ConfigDict

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, ORDER, REFUND_ORDER
from tools.catalog.models import Order
from tools.registry import ToolSpec

S = ConfirmationRequest.Status
SENT = []


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


def _send(ctx, p):
    SENT.append(p.text)
    return {"sent": p.text}


NOTE = ToolSpec(name="test_send_note", description="Send a note (LOW, writes).", parameters=Note, execute=_send)


def _answers(run_id):
    out = {}
    for m in Run.objects.get(pk=run_id).state["messages"]:
        if m["role"] == "tool":
            out.setdefault(m["tool_call_id"], []).append(json.loads(m["content"]))
    return out


def test_dup_ids_two_gated_calls_lose_no_confirmed_decision(requester, model):
    model.calls(("dup", "cancel_order", CANCEL_ARGS),
                ("dup", "cancel_order", {"order_id": REFUND_ORDER, "reason": "duplicate order"}))
    model.says("done")
    first = services.chat_send(user=requester, message="cancel two")
    p1, p2 = first.pending
    assert p1.tool_call_id != p2.tool_call_id  # every distinct call gets its own id
    # the requester confirms both with the tokens first shown; confirming one voids neither
    services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                       confirmation_token=p1.token)
    services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                       confirmation_token=p2.token)

    reqs = {str(r.pk): r for r in ConfirmationRequest.objects.all()}
    assert {reqs[p.confirmation_id].status for p in (p1, p2)} == {S.CONSUMED}
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == "CANCELLED"
    assert Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER).status == "CANCELLED"
    answers = _answers(first.run.pk)
    assert sorted(len(v) for v in answers.values()) == [1, 1]  # each call id answered once
    assert Run.objects.get(pk=first.run.pk).status == Run.Status.COMPLETED


def test_dup_ids_reexecute_an_ungated_write_on_resume(requester, model, install_tool):
    install_tool(NOTE, users=[requester])
    SENT.clear()
    model.calls(("dup", "test_send_note", {"text": "hello customer"}), ("dup", "cancel_order", CANCEL_ARGS))
    model.says("done")
    first = services.chat_send(user=requester, message="note and cancel")
    services.chat_send(user=requester, message="y", conversation_id=first.run.conversation_id,
                       confirmation_token=first.pending[0].token)
    print("notes sent", SENT, "answers", {k: [a["code"] for a in v] for k, v in _answers(first.run.pk).items()})
    assert SENT == ["hello customer"], "resume re-ran a call that already ran"
