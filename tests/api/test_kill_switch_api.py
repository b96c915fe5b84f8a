"""The kill switch over the API: who may stop and release a tool, in which scope, what a bad request
is answered, and that the stop really holds (the next call is TOOL_STOPPED) until it is released."""
from __future__ import annotations

import uuid

import pytest

from approvals.models import ConfirmationRequest
from policies.models import KillSwitch
from tests.api.conftest import assert_error
from tests.policies.support import call
from tests.tools.support import REFUND_ORDER

pytestmark = pytest.mark.django_db

REFUND = {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"}


def stop(client, tool: str, body: dict):
    return client.post(f"/api/v1/tools/{tool}/stop/", body, format="json")


def release(client, tool: str, body: dict):
    return client.post(f"/api/v1/tools/{tool}/release/", body, format="json")


def test_a_tenant_administrator_stops_and_releases_a_tool_of_their_tenant(api, acme_admin, requester,
                                                                          refund_pending):
    admin = api(acme_admin)
    response = stop(admin, "refund_order", {"reason": "payment provider incident"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["tool"], body["scope"], body["tenant"], body["active"]) == ("refund_order", "tenant", "acme", True)
    assert (body["engaged_by"], body["reason"], body["cancelled_requests"]) == (
        acme_admin.username, "payment provider incident", 1)
    request = ConfirmationRequest.objects.get(pk=refund_pending.pending[0].confirmation_id)
    assert (request.status, request.outcome_code) == ("CANCELLED", "TOOL_STOPPED")
    assert call(requester, "refund_order", REFUND).result.code == "TOOL_STOPPED"

    listed = admin.get("/api/v1/kill-switches/?active=true").json()
    assert [s["id"] for s in listed["results"]] == [body["id"]]

    assert_error(stop(admin, "refund_order", {"reason": "again"}), 409, "TOOL_ALREADY_STOPPED")
    response = release(admin, "refund_order", {"reason": "incident closed"})
    assert response.status_code == 200, response.json()
    assert (response.json()["active"], response.json()["released_by"], response.json()["release_reason"]) == (
        False, acme_admin.username, "incident closed")
    assert call(requester, "refund_order", REFUND, call_id="call_2").pending is not None
    assert_error(release(admin, "refund_order", {"reason": "again"}), 409, "TOOL_NOT_STOPPED")
    assert admin.get("/api/v1/kill-switches/?active=true").json()["results"] == []


def test_bad_requests_are_answered_with_a_code_and_stop_nothing(api, acme_admin):
    admin = api(acme_admin)
    assert_error(stop(admin, "refund_order", {}), 400, "INVALID_ARGUMENTS")
    assert_error(stop(admin, "refund_order", {"reason": "   "}), 400, "INVALID_ARGUMENTS")
    assert_error(stop(admin, "refund_order", {"reason": "x" * 501}), 400, "INVALID_ARGUMENTS")
    assert_error(stop(admin, "refund_order", {"reason": 5}), 400, "INVALID_ARGUMENTS")
    assert_error(stop(admin, "refund_order", {"reason": "ok", "why": "unknown field"}), 400, "INVALID_ARGUMENTS")
    assert_error(stop(admin, "no_such_tool", {"reason": "typo"}), 400, "UNKNOWN_TOOL")
    assert_error(admin.get("/api/v1/kill-switches/?active=maybe"), 400, "INVALID_ARGUMENTS")
    assert not KillSwitch.objects.exists()


def test_members_may_not_stop_or_list(api, requester, approver1):
    assert_error(stop(api(requester), "refund_order", {"reason": "I do not like it"}), 403, "PERMISSION_DENIED")
    assert_error(release(api(approver1), "refund_order", {"reason": "x"}), 403, "PERMISSION_DENIED")
    assert_error(api(requester).get("/api/v1/kill-switches/"), 403, "PERMISSION_DENIED")
    assert_error(api().post("/api/v1/tools/refund_order/stop/", {"reason": "x"}, format="json"), 401,
                 "NOT_AUTHENTICATED")
    assert not KillSwitch.objects.exists()


def test_another_tenants_stop_is_not_found_and_does_not_apply(api, acme_admin, globex_admin, outsider):
    body = stop(api(acme_admin), "list_orders", {"reason": "acme only"}).json()
    globex = api(globex_admin)
    assert_error(globex.post(f"/api/v1/kill-switches/{body['id']}/release/", {"reason": "x"}, format="json"),
                 404, "NOT_FOUND")
    assert_error(globex.post(f"/api/v1/kill-switches/{uuid.uuid4()}/release/", {"reason": "x"}, format="json"),
                 404, "NOT_FOUND")
    assert_error(stop(globex, "refund_order", {"reason": "x", "tenant": "acme"}), 404, "NOT_FOUND")
    assert_error(release(globex, "list_orders", {"reason": "x"}), 409, "TOOL_NOT_STOPPED")
    assert globex.get("/api/v1/kill-switches/").json()["results"] == []
    assert call(outsider, "list_orders", {}).result.success
    assert KillSwitch.objects.get(pk=body["id"]).active


def test_an_operators_stop_holds_everywhere_and_a_tenant_administrator_cannot_release_it(
        api, operator, acme_admin, globex_admin, requester, outsider):
    response = stop(api(operator), "list_orders", {"reason": "read replica broken"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["scope"], body["tenant"]) == ("platform", None)
    assert call(requester, "list_orders", {}).result.code == "TOOL_STOPPED"
    assert call(outsider, "list_orders", {}, call_id="call_2").result.code == "TOOL_STOPPED"
    # Each tenant's administrator sees the stop that applies to them, and cannot lift it.
    assert [s["id"] for s in api(globex_admin).get("/api/v1/kill-switches/").json()["results"]] == [body["id"]]
    assert_error(release(api(acme_admin), "list_orders", {"reason": "mine now"}), 403, "PERMISSION_DENIED")
    assert_error(api(acme_admin).post(f"/api/v1/kill-switches/{body['id']}/release/", {"reason": "x"},
                                      format="json"), 403, "PERMISSION_DENIED")
    assert_error(stop(api(acme_admin), "list_orders", {"reason": "me too"}), 409, "TOOL_ALREADY_STOPPED")
    response = api(operator).post(f"/api/v1/kill-switches/{body['id']}/release/", {"reason": "replica back"},
                                  format="json")
    assert response.status_code == 200 and response.json()["active"] is False
    assert call(outsider, "list_orders", {}, call_id="call_3").result.success


def test_an_operator_may_stop_a_tool_in_one_named_tenant(api, operator, requester, outsider):
    response = stop(api(operator), "list_orders", {"reason": "globex only", "tenant": "globex"})
    assert response.status_code == 201 and response.json()["tenant"] == "globex"
    assert call(outsider, "list_orders", {}).result.code == "TOOL_STOPPED"
    assert call(requester, "list_orders", {}, call_id="call_2").result.success
    assert_error(stop(api(operator), "list_orders", {"reason": "x", "tenant": "nope"}), 404, "NOT_FOUND")
    assert release(api(operator), "list_orders", {"reason": "done", "tenant": "globex"}).status_code == 200
