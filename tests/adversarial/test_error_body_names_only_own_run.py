"""An error body names only the caller's own run.

When one user's request collides with another user's waiting request in the same tenant, the error
the API returns never carries the other user's run id."""

from guardian.shortcuts import remove_perm
from rest_framework.test import APIClient

from tests.adversarial.test_supersede_across_users_and_revoked_permission import _clone_requester
from tests.tools.support import REFUND_ORDER
from tools.models import Tool


def _api(u):
    c = APIClient(); c.force_authenticate(u); return c


REFUND = lambda amt, why: {"order_id": REFUND_ORDER, "amount": amt, "reason": why}


def test_error_body_names_the_victims_run(transactional_db, requester, model):
    mallory = _clone_requester(requester, "acme-mallory")
    remove_perm("tools.use_tool", mallory, Tool.objects.get(name="query_inventory"))
    model.calls(("v1", "refund_order", REFUND("10", "broken parcel")))
    victim = _api(requester).post("/api/v1/chat/", {"message": "refund"}, format="json").json()
    model.calls(("m1", "refund_order", REFUND("1", "whatever")), ("m2", "query_inventory", {"sku": "SKU-10001"}))
    model.says("VICTIM FINAL ANSWER: refund of the broken parcel was replaced")
    r = _api(mallory).post("/api/v1/chat/", {"message": "refund too"}, format="json")
    print("mallory", r.status_code, r.json(), "| victim run", victim["run_id"])
    assert r.json().get("run_id") != victim["run_id"], "error body names another user's run"
