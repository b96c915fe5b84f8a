"""An approver's edit stays within what the requester asked for (docs/approvals.md, "Edits stay
within the request"): a tool declares which arguments approvers may change and how
(`ToolSpec.editable`); any other change is refused with EDIT_NOT_ALLOWED and nothing stored
changes. The direction is judged against the requester's own arguments, so successive edits
cannot ratchet an amount up. What ran after an edit names its editors in the EXECUTED audit row
and on the requester's event.

Run on PostgreSQL (the target) and SQLite; no concurrency here (tests/approvals/test_edit_race.py).
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from guardian.shortcuts import assign_perm
from pydantic import BaseModel, ConfigDict

from agentplatform.runtime import services
from agentplatform.runtime.models import RunEvent
from approvals.models import Approval, ConfirmationRequest
from audit.models import AuditEvent
from tests.api.conftest import api, assert_error  # noqa: F401 - fixture
from tools.catalog.models import Refund
from tools.models import Tool
from tools.registry import EditRule, ToolSpec, registry

SMALL_ORDER = "A202607290007"  # acme, PAID, CNY 76.00
OTHER_ORDER = "A202607290006"  # acme, PAID, CNY 318.00
CANCEL_ORDER = "A202607290005"  # acme, PAID


def edit(client, request_id, arguments, base, **body):
    return client.post(f"/api/v1/approvals/{request_id}/edit/",
                       {"arguments": arguments, "base_arguments_hash": base, **body}, format="json")


def approve(client, request_id, **body):
    return client.post(f"/api/v1/approvals/{request_id}/approve/", body, format="json")


def _refund_of_10(requester) -> ConfirmationRequest:
    outcome = services.chat_send(user=requester, message=f"Refund order {SMALL_ORDER} amount 10 because it arrived damaged")
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert (request.arguments["order_id"], request.arguments["amount"]) == (SMALL_ORDER, "10.00")
    return request


def _args(request: ConfirmationRequest, **changes) -> dict:
    return {**request.arguments, **changes}


def _unchanged(request: ConfirmationRequest) -> None:
    after = ConfirmationRequest.objects.get(pk=request.pk)
    assert (after.arguments, after.arguments_hash, after.revision, after.summary, after.status) == \
        (request.arguments, request.arguments_hash, request.revision, request.summary, "PENDING")


def _fields(body: dict) -> dict[str, tuple[str, str]]:
    return {e["field"]: (e["code"], e["error"]) for e in body["errors"]}


# -- the red team's retarget -------------------------------------------------------------------

def test_a_retargeted_refund_is_refused_and_the_requested_one_runs(api, requester, approver1, approver2,
                                                                    django_capture_on_commit_callbacks):
    # given: the requester asked to refund 10 of one order
    request = _refund_of_10(requester)
    # when: approver1 edits it to another order and 500
    body = assert_error(edit(api(approver1), request.pk, _args(request, order_id=OTHER_ORDER, amount=500),
                             request.arguments_hash), 400, "EDIT_NOT_ALLOWED")
    # then: refused, naming each field and why; nothing stored changed; the refusal is audited
    fields = _fields(body)
    assert fields["order_id"] == ("NOT_EDITABLE", "order_id cannot be edited")
    assert fields["amount"][0] == "ABOVE_REQUESTED"
    assert "amount may only go down from 10.00" in fields["amount"][1]
    _unchanged(request)
    assert not Approval.objects.filter(request=request).exists()
    assert not AuditEvent.objects.filter(decision="EDITED").exists()
    refusal = AuditEvent.objects.get(decision="REFUSED", confirmation_id=request.pk, status="EDIT_NOT_ALLOWED")
    assert refusal.actor_id == approver1.pk and "order_id cannot be edited" in refusal.message
    # and: the approvers approve what was asked: the requested order is refunded 10, the other one nothing
    approve(api(approver1), request.pk)
    with django_capture_on_commit_callbacks(execute=True):
        assert approve(api(approver2), request.pk).json()["status"] == "CONFIRMED"
    [refund] = Refund.objects.all()
    assert (refund.order.order_id, refund.amount) == (SMALL_ORDER, Decimal("10.00"))


# -- each field, each direction ----------------------------------------------------------------

@pytest.mark.parametrize("changes, field, code", [
    ({"order_id": OTHER_ORDER}, "order_id", "NOT_EDITABLE"),  # another order, even for the same amount
    ({"amount": "10.01"}, "amount", "ABOVE_REQUESTED"),  # one minor unit more
    ({"amount": "11"}, "amount", "ABOVE_REQUESTED"),
    ({"amount": None}, "amount", "ABOVE_REQUESTED"),  # "the full remaining amount" is more than 10
])
def test_a_refund_edit_beyond_the_request_is_refused(api, requester, approver1, changes, field, code):
    request = _refund_of_10(requester)
    body = assert_error(edit(api(approver1), request.pk, _args(request, **changes), request.arguments_hash),
                        400, "EDIT_NOT_ALLOWED")
    assert set(_fields(body)) == {field} and _fields(body)[field][0] == code
    _unchanged(request)


@pytest.mark.parametrize("changes, amount", [
    ({"amount": "9.99"}, "9.99"),  # down by one minor unit
    ({"amount": 5}, "5.00"),
    ({"reason": "only the lamp shade was broken"}, "10.00"),  # the reason: any (the tool's rules still apply)
])
def test_a_refund_edit_within_the_request_is_taken(api, requester, approver1, changes, amount):
    request = _refund_of_10(requester)
    response = edit(api(approver1), request.pk, _args(request, **changes), request.arguments_hash)
    assert response.status_code == 200, response.json()
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    assert (stored.revision, stored.arguments["order_id"], stored.arguments["amount"]) == (1, SMALL_ORDER, amount)


def test_a_full_refund_may_be_lowered_to_an_amount_but_never_back(api, requester, approver1, approver2):
    outcome = services.chat_send(user=requester, message=f"Refund order {SMALL_ORDER} because it arrived damaged")
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert request.arguments["amount"] is None
    first = edit(api(approver1), request.pk, _args(request, amount="30"), request.arguments_hash)
    assert first.status_code == 200, first.json()
    # back to "all of it" is what the requester asked: allowed (at most the requester's)
    again = edit(api(approver2), request.pk, _args(request, amount=None), first.json()["arguments_hash"])
    assert again.status_code == 200, again.json()
    assert ConfirmationRequest.objects.get(pk=request.pk).arguments["amount"] is None


def test_an_unchanged_edit_is_still_edit_unchanged(api, requester, approver1):
    request = _refund_of_10(requester)
    for spelling in ("10", "1e1", 10, "10.00"):
        assert_error(edit(api(approver1), request.pk, _args(request, amount=spelling), request.arguments_hash),
                     400, "EDIT_UNCHANGED")
    _unchanged(request)


def test_the_amount_is_judged_against_the_requesters_never_the_last_edit(api, requester, people, approver1,
                                                                           approver2):
    from tests.approvals.test_edit_race import _approvers

    third = _approvers(people, 3)[2]  # an approver before the request: standing begun later never counts
    request = _refund_of_10(requester)
    # 10 -> 5 (approver1)
    hash1 = edit(api(approver1), request.pk, _args(request, amount="5"), request.arguments_hash).json()["arguments_hash"]
    # the requester's amount is kept for the next edits, not the last edit's
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    assert stored.approval_context["edit_bounds"] == {"amount": "10.00"}
    # 5 -> 8 (approver2): above the last edit, within the request: taken
    response = edit(api(approver2), request.pk, _args(request, amount="8"), hash1)
    assert response.status_code == 200, response.json()
    hash2 = response.json()["arguments_hash"]
    # 8 -> 10.01 (a third approver): above what the requester asked: refused, whatever the path
    body = assert_error(edit(api(third), request.pk, _args(request, amount="10.01"), hash2), 400, "EDIT_NOT_ALLOWED")
    assert "may only go down from 10.00" in _fields(body)["amount"][1]
    assert ConfirmationRequest.objects.get(pk=request.pk).arguments["amount"] == "8.00"
    # 8 -> 10 (approver1 again, on the new revision): back to the requester's amount: taken
    response = edit(api(approver1), request.pk, _args(request, amount="10"), hash2)
    assert response.status_code == 200, response.json()
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    assert (stored.revision, stored.arguments["amount"]) == (3, "10.00")
    assert stored.approval_context["edit_bounds"] == {"amount": "10.00"}


def test_a_request_edited_without_its_bounds_kept_is_not_edited_again(api, requester, approver1, approver2):
    # an edit made before edits had rules kept no requester's amount: fail closed, never guess
    request = _refund_of_10(requester)
    first = edit(api(approver1), request.pk, _args(request, amount="5"), request.arguments_hash).json()
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    context = {k: v for k, v in stored.approval_context.items() if k != "edit_bounds"}
    ConfirmationRequest.objects.filter(pk=request.pk).update(approval_context=context)
    assert_error(edit(api(approver2), request.pk, _args(request, amount="4"), first["arguments_hash"]), 400,
                 "EDIT_NOT_ALLOWED")
    assert ConfirmationRequest.objects.get(pk=request.pk).arguments["amount"] == "5.00"


def test_cancel_order_lets_approvers_edit_only_the_reason(api, requester, approver1):
    # given: cancellations need approvers here (an operator's override), and approver1 may approve them
    cancel = Tool.objects.get(name="cancel_order")
    Tool.objects.filter(pk=cancel.pk).update(policy_override="APPROVERS")
    assign_perm("tools.approve_tool", approver1, cancel)
    outcome = services.chat_send(user=requester, message=f"Please cancel order {CANCEL_ORDER} because it is late")
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert request.policy == "APPROVERS"
    # another order: refused
    body = assert_error(edit(api(approver1), request.pk, _args(request, order_id=SMALL_ORDER), request.arguments_hash),
                        400, "EDIT_NOT_ALLOWED")
    assert _fields(body) == {"order_id": ("NOT_EDITABLE", "order_id cannot be edited")}
    _unchanged(request)
    # the reason: taken
    response = edit(api(approver1), request.pk, _args(request, reason="the customer asked by phone"),
                    request.arguments_hash)
    assert response.status_code == 200, response.json()
    assert response.json()["edit_rules"] == [{"field": "reason", "rule": "ANY", "limit": None}]


def test_the_api_says_what_may_be_edited(api, requester, approver1):
    request = _refund_of_10(requester)
    [row] = [r for r in api(approver1).get("/api/v1/approvals/").json()["results"] if r["id"] == str(request.pk)]
    assert row["edit_rules"] == [{"field": "amount", "rule": "DECREASE_ONLY", "limit": "10.00"},
                                 {"field": "reason", "rule": "ANY", "limit": None}]


# -- tools that declare nothing (every remote tool) --------------------------------------------

class _Remote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: str
    note: str = ""


def test_a_tool_that_declares_nothing_cannot_be_edited(api, install_tool, model, requester, approver1):
    # given: a tool like a remote one: no `editable`, approver-gated
    tool = install_tool(ToolSpec(name="remote_like_action", description="acts on a target", parameters=_Remote,
                                 execute=lambda ctx, p: {"ok": True}, risk="CRITICAL", quorum=2),
                        users=[requester])
    assign_perm("tools.approve_tool", approver1, tool)
    model.calls(("call_1", "remote_like_action", {"target": "a", "note": "x"}))
    outcome = services.chat_send(user=requester, message="act on a")
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert request.policy == "APPROVERS"
    for changes in ({"target": "b"}, {"note": "y"}):
        body = assert_error(edit(api(approver1), request.pk, _args(request, **changes), request.arguments_hash),
                            400, "EDIT_NOT_ALLOWED")
        assert [e["code"] for e in body["errors"]] == ["NOT_EDITABLE"]
    _unchanged(request)
    [row] = [r for r in api(approver1).get("/api/v1/approvals/").json()["results"] if r["id"] == str(request.pk)]
    assert row["edit_rules"] == []


def test_remote_tool_specs_declare_nothing_editable():
    from types import SimpleNamespace

    from mcp_sources.specs import _build

    row = SimpleNamespace(tool=SimpleNamespace(name="crm__update_customer", owner="", version=""),
                          input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
                          server_id=1, remote_name="update_customer", reviewed_hash="h", description="d",
                          reviewed_definition={"name": "update_customer", "description": "d",
                                               "inputSchema": {"type": "object",
                                                               "properties": {"id": {"type": "string"}}}},
                          server=SimpleNamespace(source="mcp:crm"))
    spec = _build(row)
    assert spec is not None and spec.remote is not None
    assert dict(spec.editable) == {}  # closed: an approver may change none of its arguments


def test_editable_must_name_the_tools_own_arguments():
    spec = ToolSpec(name="bad_editable", description="x", parameters=_Remote, execute=lambda ctx, p: {},
                    editable={"amount": EditRule.DECREASE_ONLY})
    with pytest.raises(ValueError, match="editable"):
        registry.register(spec)
    assert registry.get("bad_editable") is None


# -- what ran, and who changed it --------------------------------------------------------------

def test_the_executed_row_and_the_requesters_event_name_the_editor(api, requester, approver1, approver2,
                                                                    django_capture_on_commit_callbacks):
    request = _refund_of_10(requester)
    original = request.arguments_hash
    edited = edit(api(approver1), request.pk, _args(request, amount="6"), original).json()
    with django_capture_on_commit_callbacks(execute=True):
        assert approve(api(approver2), request.pk, arguments_hash=edited["arguments_hash"]).json()["status"] == \
            "CONFIRMED"
    assert Refund.objects.get().amount == Decimal("6.00")
    executed = AuditEvent.objects.get(decision="EXECUTED", confirmation_id=request.pk)
    # the requester stays the actor (their call, their permissions); the editor is beside them
    assert executed.actor_id == requester.pk
    assert executed.arguments_hash == edited["arguments_hash"]
    assert executed.masked_arguments["amount"] == "6.00"
    assert executed.masked_arguments["_edit"] == {
        "requested_by": requester.username, "edited_by": [approver1.username],
        "original_arguments_hash": original, "revision": 1}
    assert f"edited by {approver1.username}" in executed.message and requester.username in executed.message
    event = RunEvent.objects.get(run_id=request.run_id, type="TOOL_EXECUTION_COMPLETED")
    assert event.payload["edited_by"] == [approver1.username]
    assert event.payload["summary"].startswith(f"Refund CNY 6.00 of order {SMALL_ORDER}")
    assert event.payload["masked_arguments"]["amount"] == "6.00"
    assert event.payload["facts"]["refund_amount"]["amount"] == "6.00"


def test_an_unedited_call_has_no_edit_provenance(api, requester, approver1, approver2,
                                                  django_capture_on_commit_callbacks):
    request = _refund_of_10(requester)
    approve(api(approver1), request.pk)
    with django_capture_on_commit_callbacks(execute=True):
        approve(api(approver2), request.pk)
    executed = AuditEvent.objects.get(decision="EXECUTED", confirmation_id=request.pk)
    assert "_edit" not in executed.masked_arguments and "edited by" not in executed.message
