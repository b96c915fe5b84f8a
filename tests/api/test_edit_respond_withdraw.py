"""Through the API: approvers edit the arguments or respond with guidance;
requesters list their requests and withdraw a pending one. Roles, tenants, stable error codes,
"nothing changed" on refusal, and what the run and the model are told."""
from __future__ import annotations

import json
import uuid
from decimal import Decimal

from agentplatform.runtime.models import Message, Run, RunEvent
from approvals.models import Approval, ConfirmationRequest
from audit.models import AuditEvent
from tests.api.conftest import REFUND_ORDER, assert_error
from tools.catalog.models import Refund


def edit(client, request_id, arguments, base, **body):
    return client.post(f"/api/v1/approvals/{request_id}/edit/",
                       {"arguments": arguments, "base_arguments_hash": base, **body}, format="json")


def approve(client, request_id, **body):
    return client.post(f"/api/v1/approvals/{request_id}/approve/", body, format="json")


def respond(client, request_id, **body):
    return client.post(f"/api/v1/approvals/{request_id}/respond/", body, format="json")


def withdraw(client, request_id, **body):
    return client.post(f"/api/v1/my-requests/{request_id}/withdraw/", body, format="json")


def _stored(refund_pending) -> ConfirmationRequest:
    return ConfirmationRequest.objects.get(pk=refund_pending.pending[0].confirmation_id)


def _refund_args(**changes):
    return {"order_id": REFUND_ORDER, "reason": "it arrived damaged", **changes}


def _tool_results(run_id) -> list[dict]:
    return [json.loads(m.content) for m in Message.objects.filter(run_id=run_id, role="tool").order_by("pk")]


# -- edit -------------------------------------------------------------------------------------------

def test_an_edit_rebinds_restarts_the_quorum_and_runs_the_edited_arguments_once(
        api, requester, approver1, approver2, refund_pending, django_capture_on_commit_callbacks):
    request = _stored(refund_pending)
    original = request.arguments_hash
    assert request.arguments["amount"] is None  # the model asked for a full refund
    # given: approver1 approved the full refund
    assert approve(api(approver1), request.pk).json()["approvals"] == 1
    # when: approver2 edits the amount to "50" (normalised to 50.00 CNY by the tool)
    response = edit(api(approver2), request.pk, _refund_args(amount="50"), original, comment="partial only")
    # then: a new binding, audited beside the original; the quorum restarts with the edit as approver2's approval
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["masked_arguments"]["amount"] == "50.00"
    assert body["summary"].startswith(f"Refund CNY 50.00 of order {REFUND_ORDER}")
    assert (body["revision"], body["original_arguments_hash"]) == (1, original)
    assert body["arguments_hash"] != original and body["status"] == "PENDING"
    assert body["approvals"] == 1  # the edit; approver1's approval of the full refund no longer counts
    edit_decision = body["decisions"][-1]
    assert (edit_decision["approver"], edit_decision["decision"], edit_decision["comment"]) == \
        (approver2.username, "EDIT", "partial only")
    assert edit_decision["changes"] == [{"field": "amount", "from": None, "to": "50.00"}]
    row = AuditEvent.objects.get(decision="EDITED", confirmation_id=request.pk)
    assert row.arguments_hash == body["arguments_hash"] and original in row.message
    assert row.actor_id == approver2.pk and "amount" in row.message
    # an approval without the edited hash is refused (it may have been made on the old arguments)
    assert_error(approve(api(approver1), request.pk), 409, "ARGUMENTS_CHANGED")
    assert_error(approve(api(approver1), request.pk, arguments_hash=original), 409, "ARGUMENTS_CHANGED")
    assert Refund.objects.count() == 0
    # when: approver1 approves the edited arguments: quorum (2 of 2, one of them not the editor)
    with django_capture_on_commit_callbacks(execute=True):
        done = approve(api(approver1), request.pk, arguments_hash=body["arguments_hash"])
    assert done.status_code == 200 and done.json()["status"] == "CONFIRMED"
    # then: the edited call ran, exactly once
    [refund] = Refund.objects.all()
    assert refund.amount == Decimal("50.00")
    request.refresh_from_db()
    assert (request.status, request.outcome_code) == ("CONSUMED", "OK")
    run = Run.objects.get(pk=refund_pending.run.pk)
    assert run.status == Run.Status.COMPLETED
    [result] = _tool_results(run.pk)
    assert result["success"] is True and approver2.username in result["message"] and "50.00" in result["message"]
    event = RunEvent.objects.get(run=run, type="TOOL_EXECUTION_COMPLETED")
    assert event.payload["edited_by"] == [approver2.username]
    assert event.payload["changes"] == [{"field": "amount", "from": None, "to": "50.00"}]
    assert "edited" in run.final_answer and "50.00" in run.final_answer


def test_the_same_amount_in_another_spelling_is_not_an_edit(api, approver1, refund_pending):
    request = _stored(refund_pending)
    first = edit(api(approver1), request.pk, _refund_args(amount="50"), request.arguments_hash).json()
    # "50.00" and 5e1 bind the same call as "50": nothing to edit
    for spelling in ("50.00", "5e1", 50):
        assert_error(edit(api(approver1), request.pk, _refund_args(amount=spelling), first["arguments_hash"]),
                     400, "EDIT_UNCHANGED")
    assert _stored(refund_pending).revision == 1


def test_invalid_edits_change_nothing(api, approver1, refund_pending):
    request = _stored(refund_pending)
    base = request.arguments_hash
    cases = [
        (_refund_args(amount="abc"), "amount"),  # not a number (money)
        (_refund_args(amount="10.005"), "amount"),  # more precise than CNY allows
        (_refund_args(amount="-5"), "amount"),  # the schema: > 0
        (_refund_args(tenantId=2), "tenantId"),  # extra="forbid"
        ({"order_id": REFUND_ORDER}, "reason"),  # missing
        (_refund_args(order_id="X1"), None),  # business rule
        (_refund_args(amount="99999"), "(precheck)"),  # more than the order's remainder
    ]
    for arguments, field in cases:
        body = assert_error(edit(api(approver1), request.pk, arguments, base), 400, "INVALID_ARGUMENTS")
        if field:
            assert field in {e["field"] for e in body["errors"]}, body
    money = assert_error(edit(api(approver1), request.pk, _refund_args(amount="10.005"), base), 400,
                         "INVALID_ARGUMENTS")
    assert money["errors"][0]["code"] == "AMOUNT_TOO_PRECISE"
    assert_error(edit(api(approver1), request.pk, "not an object", base), 400, "INVALID_ARGUMENTS")
    assert_error(api(approver1).post(f"/api/v1/approvals/{request.pk}/edit/", {"arguments": _refund_args()},
                                     format="json"), 400, "INVALID_ARGUMENTS")  # no base hash
    # then: nothing changed
    after = _stored(refund_pending)
    assert (after.arguments_hash, after.revision, after.arguments, after.summary) == \
        (base, 0, request.arguments, request.summary)
    assert not Approval.objects.filter(request=request).exists()
    assert not AuditEvent.objects.filter(decision="EDITED").exists()
    assert AuditEvent.objects.filter(decision="REFUSED", confirmation_id=request.pk,
                                     status="INVALID_ARGUMENTS").exists()  # refusals are audited


def test_who_may_edit(api, requester, nobody, outsider_approver, cancel_pending, approver1, refund_pending):
    request = _stored(refund_pending)
    args, base = _refund_args(amount="50"), request.arguments_hash
    assert_error(edit(api(requester), request.pk, args, base), 403, "APPROVAL_FORBIDDEN")  # own request
    assert_error(edit(api(nobody), request.pk, args, base), 403, "APPROVAL_FORBIDDEN")  # no approve_tool
    assert_error(edit(api(outsider_approver), request.pk, args, base), 404, "CONFIRMATION_INVALID")  # other tenant
    assert_error(edit(api(approver1), uuid.uuid4(), args, base), 404, "CONFIRMATION_INVALID")
    cancel = ConfirmationRequest.objects.get(pk=cancel_pending.pending[0].confirmation_id)
    assert_error(edit(api(approver1), cancel.pk, {"order_id": cancel.arguments["order_id"], "reason": "x"},
                      cancel.arguments_hash), 403, "APPROVAL_FORBIDDEN")  # requester-confirmed call
    assert _stored(refund_pending).revision == 0


def test_a_stale_edit_is_refused(api, approver1, approver2, refund_pending):
    request = _stored(refund_pending)
    base = request.arguments_hash
    assert edit(api(approver1), request.pk, _refund_args(amount="50"), base).status_code == 200
    assert_error(edit(api(approver2), request.pk, _refund_args(amount="70"), base), 409, "ARGUMENTS_CHANGED")
    assert _stored(refund_pending).masked_arguments["amount"] == "50.00"


def test_the_editor_never_completes_the_quorum_alone(api, approver1, approver2, refund_pending,
                                                     django_capture_on_commit_callbacks):
    request = _stored(refund_pending)
    ConfirmationRequest.objects.filter(pk=request.pk).update(quorum=1)  # one approval would do
    body = edit(api(approver1), request.pk, _refund_args(amount="50"), request.arguments_hash).json()
    assert (body["status"], body["approvals"], body["quorum"]) == ("PENDING", 1, 1)  # the edit alone: not enough
    assert_error(approve(api(approver1), request.pk, arguments_hash=body["arguments_hash"]), 409, "ALREADY_DECIDED")
    assert _stored(refund_pending).status == "PENDING" and Refund.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=True):
        done = approve(api(approver2), request.pk, arguments_hash=body["arguments_hash"])
    assert done.json()["status"] == "CONFIRMED"
    assert Refund.objects.get().amount == Decimal("50.00")


# -- respond ----------------------------------------------------------------------------------------

def test_respond_sends_guidance_to_the_model_and_the_run_continues(api, approver1, refund_pending,
                                                                   django_capture_on_commit_callbacks):
    request = _stored(refund_pending)
    assert_error(respond(api(approver1), request.pk, guidance="   "), 400, "INVALID_ARGUMENTS")
    with django_capture_on_commit_callbacks(execute=True):
        response = respond(api(approver1), request.pk, guidance="Refund only the damaged item: CNY 80")
    assert response.status_code == 200 and response.json()["status"] == "RESPONDED"
    assert response.json()["outcome"] == "RESPONDED"
    assert Refund.objects.count() == 0
    run = Run.objects.get(pk=refund_pending.run.pk)
    assert run.status == Run.Status.COMPLETED
    [result] = _tool_results(run.pk)
    # neither a success nor a rejection
    assert (result["success"], result["code"]) == (False, "APPROVER_GUIDANCE")
    assert result["data"]["guidance"] == "Refund only the damaged item: CNY 80"
    assert result["data"]["responded_by"] == {"role": "approver", "username": approver1.username,
                                              "name": approver1.get_full_name() or approver1.username}
    assert "CNY 80" in run.final_answer and "rejected" not in run.final_answer.lower()
    assert AuditEvent.objects.filter(decision="RESPONDED", confirmation_id=request.pk, actor=approver1).exists()
    assert_error(approve(api(approver1), request.pk), 409, "ALREADY_DECIDED")


# -- my requests and withdraw -----------------------------------------------------------------------

def test_my_requests_show_state_approvers_comments_and_expiry(api, requester, approver1, nobody, outsider,
                                                              refund_pending, cancel_pending):
    refund_id = refund_pending.pending[0].confirmation_id
    approve(api(approver1), refund_id, comment="photos checked")
    page = api(requester).get("/api/v1/my-requests/").json()
    assert page["count"] == 2
    by_id = {r["id"]: r for r in page["results"]}
    refund = by_id[refund_id]
    assert (refund["status"], refund["needs"], refund["approvals"], refund["quorum"], refund["can_withdraw"]) == \
        ("PENDING", "approvers", 1, 2, True)
    assert [(d["approver"], d["decision"], d["comment"]) for d in refund["decisions"]] == \
        [(approver1.username, "APPROVE", "photos checked")]
    assert refund["expires_at"] and refund["masked_arguments"]["order_id"] == REFUND_ORDER
    assert by_id[cancel_pending.pending[0].confirmation_id]["needs"] == "requester"
    assert api(requester).get("/api/v1/my-requests/?state=history").json()["count"] == 0
    assert api(requester).get("/api/v1/my-requests/?state=open").json()["count"] == 2
    # nobody else sees them: not an approver, not a colleague, not another tenant
    for user in (approver1, nobody, outsider):
        assert api(user).get("/api/v1/my-requests/").json()["count"] == 0
    assert_error(api(requester).get("/api/v1/my-requests/?state=done"), 400, "INVALID_ARGUMENTS")


def test_withdraw_ends_the_request_and_tells_the_run(api, requester, approver1, refund_pending,
                                                    django_capture_on_commit_callbacks):
    request_id = refund_pending.pending[0].confirmation_id
    with django_capture_on_commit_callbacks(execute=True):
        response = withdraw(api(requester), request_id, reason="customer called back")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["outcome"], body["can_withdraw"]) == ("WITHDRAWN", "WITHDRAWN", False)
    assert body["decided_by"] == {"role": "requester", "username": requester.username}
    assert body["reason"] == "customer called back"
    assert AuditEvent.objects.filter(decision="WITHDRAWN", confirmation_id=request_id, actor=requester).exists()
    run = Run.objects.get(pk=refund_pending.run.pk)
    assert run.status == Run.Status.COMPLETED
    [result] = _tool_results(run.pk)
    assert (result["success"], result["code"]) == (False, "WITHDRAWN")
    assert RunEvent.objects.get(run=run, type="TOOL_EXECUTION_COMPLETED").payload["code"] == "WITHDRAWN"
    assert "withdrew" in run.final_answer
    # approvers can no longer decide it
    assert_error(approve(api(approver1), request_id), 409, "ALREADY_DECIDED")
    assert Refund.objects.count() == 0


def test_withdraw_refusals(api, requester, approver1, outsider, nobody, refund_pending, cancel_pending):
    request_id = refund_pending.pending[0].confirmation_id
    for other in (approver1, nobody, outsider):  # someone else's request is unknown to them
        assert_error(withdraw(api(other), request_id), 404, "CONFIRMATION_INVALID")
    assert_error(withdraw(api(requester), uuid.uuid4()), 404, "CONFIRMATION_INVALID")
    assert _stored(refund_pending).status == "PENDING"
    assert withdraw(api(requester), request_id).status_code == 200
    assert_error(withdraw(api(requester), request_id), 409, "ALREADY_DECIDED")  # decided already
    # a requester-confirmed call: withdrawn, its token is void
    pending = cancel_pending.pending[0]
    assert withdraw(api(requester), pending.confirmation_id).status_code == 200
    confirm = api(requester).post("/api/v1/confirmations/confirm/", {"token": pending.token}, format="json")
    assert confirm.status_code in (404, 409)
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == "WITHDRAWN"


def test_withdraw_after_approval_is_a_conflict(api, requester, approver1, approver2, refund_pending, monkeypatch):
    from tests.tools.support import resume_not_enqueued

    request_id = refund_pending.pending[0].confirmation_id
    with resume_not_enqueued():
        approve(api(approver1), request_id)
        approve(api(approver2), request_id)
    assert _stored(refund_pending).status == "CONFIRMED"
    assert_error(withdraw(api(requester), request_id), 409, "ALREADY_DECIDED")


def test_the_schema_describes_the_new_endpoints(api, requester):
    schema = api(requester).get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for path, operation in [("/api/v1/approvals/{request_id}/edit/", "approvals_edit"),
                            ("/api/v1/approvals/{request_id}/respond/", "approvals_respond"),
                            ("/api/v1/my-requests/{request_id}/withdraw/", "my_requests_withdraw")]:
        post = paths[path]["post"]
        assert post["operationId"] == operation
        assert {"200", "400", "403", "404", "409", "410"} <= set(post["responses"])
    assert paths["/api/v1/my-requests/"]["get"]["operationId"] == "my_requests_list"
    assert "ARGUMENTS_CHANGED" in paths["/api/v1/approvals/{request_id}/edit/"]["post"]["responses"]["409"]["description"]
    assert "base_arguments_hash" in schema["components"]["schemas"]["EditInputRequest"]["properties"]


def test_quorum_reached_never_counts_the_editor_alone():
    # the rule used both when deciding and again at consume time (over the approvers still standing)
    from approvals.rules import quorum_reached

    def decision(approver_id, kind, revision=1):
        return Approval(approver_id=approver_id, decision=kind, revision=revision)

    assert not quorum_reached([decision(1, "EDIT")], quorum=1, revision=1)
    assert quorum_reached([decision(1, "EDIT"), decision(2, "APPROVE")], quorum=1, revision=1)
    assert quorum_reached([decision(1, "EDIT"), decision(2, "APPROVE")], quorum=2, revision=1)
    assert not quorum_reached([decision(1, "EDIT"), decision(2, "APPROVE", revision=0)], quorum=1, revision=1)
    assert not quorum_reached([decision(1, "EDIT"), decision(2, "REJECT")], quorum=1, revision=1)
    assert quorum_reached([decision(1, "APPROVE", 0), decision(2, "APPROVE", 0)], quorum=2, revision=0)
    assert not quorum_reached([decision(1, "APPROVE", 0)], quorum=2, revision=0)
