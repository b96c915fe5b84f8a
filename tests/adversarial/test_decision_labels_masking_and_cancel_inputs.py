"""What the decision views say, and what the run-cancel endpoint accepts.

A CONFIRMED request waiting for its turn is not relabelled EXPIRED in the approvers' history; card
numbers and tokens in reasons and comments are masked wherever a decision is shown (the run's
`decisions`, its error message, the audit row); the cancel endpoint answers odd bodies (huge,
null, a list, a NUL), unknown or foreign ids, finished runs and malformed JSON with a JSON error,
never a 500."""
import datetime
import uuid

import pytest
from rest_framework.test import APIClient

from core import clock
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.tools.support import CANCEL_ARGS, ORDER, REFUND_ORDER

S = ConfirmationRequest.Status


def _api(u):
    c = APIClient(); c.force_authenticate(u); return c


def _refund(requester, amount="10", order=REFUND_ORDER, conversation_id=None, user=None):
    out = services.chat_send(user=user or requester, conversation_id=conversation_id,
                             message=f"refund {order} amount {amount} because the parcel arrived broken")
    return out, uuid.UUID(out.pending[0].confirmation_id)


def test_confirmed_request_waiting_for_its_turn_shown_expired_to_approvers(requester, approver1, approver2, model,
                                                                         monkeypatch):
    # one turn: a refund (approvers) and a cancel (requester); approvers confirm the refund first
    model.calls(("r", "refund_order", {"order_id": REFUND_ORDER, "amount": "10", "reason": "broken parcel"}),
                ("c", "cancel_order", CANCEL_ARGS))
    first = services.chat_send(user=requester, message="x")
    rid = next(p.confirmation_id for p in first.pending if p.tool_call_id == "r")
    for a in (approver1, approver2):
        approver_actions.confirmation_approve(request_id=rid, approver=a)
    req = ConfirmationRequest.objects.get(pk=rid)
    assert req.status == S.CONFIRMED
    # the refund's deadline passes while the requester still thinks about the cancel (TTL of cancel is longer?)
    monkeypatch.setattr(clock, "now", lambda: req.expires_at + datetime.timedelta(seconds=1))
    monkeypatch.setattr("django.conf.settings.APPROVALS_SETTLE_ON_READ", False)
    hist = _api(approver1).get("/api/v1/approvals/?status=history").json()["results"]
    shown = {r["id"]: r["status"] for r in hist}
    print("approver sees", shown[str(rid)], "db", ConfirmationRequest.objects.get(pk=rid).status)
    assert shown[str(rid)] == "CONFIRMED", "a CONFIRMED decision is relabelled EXPIRED to the approver"


def test_decisions_field_masking_and_roles(requester, approver1, approver2, acme_admin,
                                           django_capture_on_commit_callbacks):
    out, rid = _refund(requester)
    approver_actions.confirmation_approve(request_id=rid, approver=approver1,
                                   comment="card 4111111111111111 checked, phone 13812345678")
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=rid, approver=approver2,
                                      reason="customer card 4111111111111111 reported stolen")
    body = _api(requester).get(f"/api/v1/runs/{out.run.pk}/").json()
    d = body["decisions"][0]
    print("decision reason", d["reason"], "| comments", [a["comment"] for a in d["approvals"]])
    ev = Run.objects.get(pk=out.run.pk).events.filter(type="TOOL_EXECUTION_COMPLETED").last()
    print("event reason", ev.payload["reason"])
    # run cancelled by a tenant admin: who is named?
    out2 = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    r = _api(acme_admin).post(f"/api/v1/runs/{out2.run.pk}/cancel/", {"reason": "card 4111111111111111 ct_AAAAAAAAAAAAAAAAAAAAAAAA"}, format="json")
    print("cancel", r.status_code, r.json()["error_message"])
    body2 = _api(requester).get(f"/api/v1/runs/{out2.run.pk}/").json()
    print("decided_by after admin cancel", body2["decisions"][0]["decided_by"], body2["decisions"][0]["reason"])
    aud = AuditEvent.objects.filter(run_id=out2.run.pk, status="RUN_CANCELLED").first()
    print("audit msg", aud.message)
    leaks = [x for x in (d["reason"], *[a["comment"] for a in d["approvals"]], body2["error_message"], aud.message)
             if "4111111111111111" in x or "ct_AAAA" in x]
    assert not leaks, leaks


@pytest.mark.parametrize("body", [
    {"reason": "x" * 100000}, {"reason": 12345}, {"reason": None}, {"reason": ["a"]}, {"reason": {"a": 1}},
    ["not", "an", "object"], "just a string", {"reason": "\x00"}, {"reason": True},
])
def test_cancel_odd_bodies(requester, body):
    out = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    c = _api(requester)
    r = c.post(f"/api/v1/runs/{out.run.pk}/cancel/", body, format="json")
    print(repr(body)[:40], r.status_code, r["Content-Type"], r.content[:150])
    assert r["Content-Type"].startswith("application/json") and r.status_code < 500


def test_cancel_odd_ids_and_finished(requester, outsider):
    c = _api(requester)
    for path in [f"/api/v1/runs/{uuid.uuid4()}/cancel/", "/api/v1/runs/nope/cancel/", "/api/v1/runs/00000000-0000-0000-0000-000000000000/cancel/"]:
        r = c.post(path, {}, format="json")
        print(path, r.status_code, r.content[:100])
        assert r.status_code == 404 and r["Content-Type"].startswith("application/json")
    out = services.chat_send(user=requester, message="list my orders")
    r = c.post(f"/api/v1/runs/{out.run.pk}/cancel/", {}, format="json")
    print("finished", r.status_code, r.json())
    assert r.status_code == 409
    r = _api(outsider).post(f"/api/v1/runs/{out.run.pk}/cancel/", {}, format="json")
    print("outsider", r.status_code, r.json())
    assert r.status_code == 404 and "run_id" not in r.json()
    # GET via cancel path and bad content-type
    r = c.get(f"/api/v1/runs/{out.run.pk}/cancel/")
    print("GET", r.status_code, r["Content-Type"])
    r = c.generic("POST", f"/api/v1/runs/{out.run.pk}/cancel/", "reason=x", content_type="application/x-www-form-urlencoded")
    print("form", r.status_code, r["Content-Type"], r.content[:100])
    r = c.generic("POST", f"/api/v1/runs/{out.run.pk}/cancel/", "{bad json", content_type="application/json")
    print("badjson", r.status_code, r["Content-Type"], r.content[:100])
    assert r.status_code == 400
