"""Malformed reasons for cancelling a run or rejecting a request.

A lone UTF-16 surrogate in the JSON body is answered with a JSON response below 500, and a number
given as a reason is refused as INVALID_ARGUMENTS without cancelling the run."""
from rest_framework.test import APIClient
from agentplatform.runtime.models import Run
from agentplatform.runtime import services
from tests.tools.support import ORDER, REFUND_ORDER


def _api(u):
    c = APIClient(); c.force_authenticate(u); return c


def test_cancel_reason_lone_surrogate(transactional_db, requester):
    out = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    c = _api(requester)
    c.raise_request_exception = False
    r = c.generic("POST", f"/api/v1/runs/{out.run.pk}/cancel/", b'{"reason": "a\\ud800b"}', content_type="application/json")
    print("cancel surrogate", r.status_code, r["Content-Type"], r.content[:200])
    assert r.status_code < 500 and r["Content-Type"].startswith("application/json")


def test_reject_reason_lone_surrogate(transactional_db, requester, approver1):
    out = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because broken")
    rid = out.pending[0].confirmation_id
    c = _api(approver1)
    c.raise_request_exception = False
    r = c.generic("POST", f"/api/v1/approvals/{rid}/reject/", b'{"reason": "a\\ud800b"}', content_type="application/json")
    print("reject surrogate", r.status_code, r["Content-Type"], r.content[:200])
    assert r.status_code < 500 and r["Content-Type"].startswith("application/json")


def test_cancel_reason_int(requester):
    out = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    r = _api(requester).post(f"/api/v1/runs/{out.run.pk}/cancel/", {"reason": 12345}, format="json")
    # a number is not a reason: refused with the error body, and the run is not cancelled
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_ARGUMENTS")
    assert Run.objects.get(pk=out.run.pk).status == Run.Status.AWAITING_CONFIRMATION
