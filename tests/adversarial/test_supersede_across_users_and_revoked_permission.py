"""Supersession across users of one tenant, and a permission revoked in the middle of a run.

Another user's request for the same order never ends my half-approved request; a permission (and
the account's activity) revoked between two model calls of one run is in force for the next call:
the tool is no longer offered and no confirmation is minted."""
from agentplatform.llm import client as llm_client  # the loop calls the model through it
import json
import uuid

from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from agentplatform.tenancy.models import User
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import REFUND_ORDER, CANCEL_ARGS
from tools.models import Tool

S = ConfirmationRequest.Status


def _clone_requester(requester, name):
    u = User.objects.create(username=name, tenant=requester.tenant)
    u.user_permissions.add(*requester.user_permissions.all())
    for t in Tool.objects.all():
        if requester.has_perm("tools.use_tool", t):
            assign_perm("tools.use_tool", u, t)
    return User.objects.get(pk=u.pk)


def _answers(run_id):
    out = {}
    for m in Run.objects.get(pk=run_id).state["messages"]:
        if m["role"] == "tool":
            out.setdefault(m["tool_call_id"], []).append(json.loads(m["content"]))
    return out


def test_another_user_supersedes_my_approved_refund(requester, approver1, approver2, django_capture_on_commit_callbacks):
    mallory = _clone_requester(requester, "acme-mallory")
    mine = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because the parcel arrived broken")
    rid = uuid.UUID(mine.pending[0].confirmation_id)
    approver_actions.confirmation_approve(request_id=rid, approver=approver1)
    with django_capture_on_commit_callbacks(execute=True):
        services.chat_send(user=mallory, message=f"refund {REFUND_ORDER} amount 1 because whatever")
    req = ConfirmationRequest.objects.get(pk=rid)
    told = _answers(mine.run.pk)
    print("my request", req.status, req.decision_reason, "| my model told", [(a["code"], a["message"]) for v in told.values() for a in v])
    assert req.status == S.PENDING, "another user's request ended my (half-approved) request"


def test_cancel_perm_revoked_mid_run_is_not_in_force_for_next_model_call(requester, model, monkeypatch):
    """Model-level permission (catalog.cancel_order) revoked between two model calls of one run."""
    model.calls(("l", "list_orders", {}))
    model.calls(("c", "cancel_order", CANCEL_ARGS))
    model.says("done")
    real, seen = llm_client.complete, []

    def revoke(**kw):
        seen.append(kw)
        t = real(**kw)
        if len(seen) == 1:
            requester.user_permissions.remove(Permission.objects.get(codename="cancel_order"))
            User.objects.filter(pk=requester.pk).update(is_active=False)
        return t

    monkeypatch.setattr(llm_client, "complete", revoke)
    try:
        out = services.chat_send(user=requester, message="list then cancel")
        print("outcome", out.run.status, [p.tool for p in out.pending])
    except Exception as e:
        print("raised", type(e).__name__, getattr(e, "code", ""))
    offered = [t["function"]["name"] for t in model.requests[1].body.get("tools", [])] \
        if len(model.requests) > 1 else None
    print("offered on 2nd model call", offered)
    print("requests", [(r.tool_name, r.status) for r in ConfirmationRequest.objects.all()])
    assert offered is None or "cancel_order" not in offered
    assert not ConfirmationRequest.objects.exists(), "an inactive user without the permission minted a confirmation"
