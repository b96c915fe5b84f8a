"""A decided call sent back to approvers because its policy became stricter is told to the
requester in words, in both languages, through every way they read it: the run's events (live and
after a reload: GET /runs/{id}/events/), the run API and GET /my-requests/. One test per cause:
the requester's confirmation no longer suffices, the quorum was raised, an approval lapsed."""
from __future__ import annotations

import json
import uuid

from rest_framework.test import APIClient

from agentplatform.runtime import services
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.tenancy.models import User
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.tools.support import ORDER, REFUND_ORDER
from tools.catalog.models import Cancellation, Refund
from tools.models import RiskLevel, Tool

Status = ConfirmationRequest.Status


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _told(requester, run_id) -> dict:
    """What the requester reads about the run after a reload: the events, the run, my requests."""
    api = _api(requester)
    return {"events": _replayed(api, run_id), "run": api.get(f"/api/v1/runs/{run_id}/").json(),
            "mine": api.get("/api/v1/my-requests/").json()["results"]}


def _replayed(api: APIClient, run_id) -> list[dict]:
    """The run's stored events as GET /runs/{id}/events/ replays them (Server-Sent Events), read
    until every stored one arrived (a waiting run's stream stays open for new ones)."""
    stored = RunEvent.objects.filter(run_id=run_id).count()
    response = api.get(f"/api/v1/runs/{run_id}/events/")
    assert response.status_code == 200
    events, buffer = [], ""
    for piece in response.streaming_content:
        buffer += piece.decode()
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in fields:
                events.append({"type": fields["event"], "payload": json.loads(fields["data"])})
        if len(events) >= stored:
            break  # not response.close(): its request_finished signal would close the test's connection
    return events


def _last_wait(events: list[dict]) -> dict:
    waits = [e for e in events if e["type"] == "CONFIRMATION_REQUIRED"]
    return waits[-1]["payload"]


def _refund(requester):
    outcome = services.chat_send(user=requester,
                                 message=f"refund {REFUND_ORDER} amount 10 because the parcel arrived broken")
    [pending] = outcome.pending
    return outcome.run, uuid.UUID(pending.confirmation_id)


def test_a_confirmation_sent_to_approvers_tells_the_requester_why(requester, approver1, approver2,
                                                                 django_capture_on_commit_callbacks):
    # given: the requester's cancellation needs their own confirmation; then the risk is raised
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [pending] = first.pending
    Tool.objects.filter(name="cancel_order").update(risk_override=RiskLevel.CRITICAL)

    # when: they confirm with the token, as the chat page does
    with django_capture_on_commit_callbacks(execute=True):
        confirmed = _api(requester).post("/api/v1/confirmations/confirm/", {"token": pending.token}, format="json")
    assert confirmed.status_code == 200, confirmed.content

    # then: nothing ran; the run's last word on the call is "waiting for 2 approvers, because"
    told = _told(requester, first.run.pk)
    assert not Cancellation.objects.exists()
    wait = _last_wait(told["events"])
    assert (wait["tool_call_id"], wait["needs"], wait["quorum"]) == (pending.tool_call_id, "approvers", 2)
    assert wait["regated"] == {
        "cause": "APPROVERS_NOW", "tool": "cancel_order", "quorum": 2, "approvals": 0,
        "message": "The policy of cancel_order became stricter after you confirmed: it now needs 2 approvers "
                   "(risk CRITICAL). Your request is waiting for them.",
        "message_zh": "您确认后 cancel_order 的策略变得更严格：现在需要 2 位审批人（风险 CRITICAL），您的请求正在等待审批。"}
    assert wait["reason"] == f'{wait["regated"]["message"]} / {wait["regated"]["message_zh"]}'
    completed = [e for e in told["events"] if e["type"] == "TOOL_EXECUTION_COMPLETED"
                 and e["payload"]["tool_call_id"] == pending.tool_call_id]
    assert completed == []  # never shown as done
    assert told["run"]["status"] == Run.Status.AWAITING_CONFIRMATION
    assert [(p["needs"], p["quorum"], p["approvals"]) for p in told["run"]["pending"]] == [("approvers", 2, 0)]
    [mine] = told["mine"]
    assert (mine["status"], mine["needs"], mine["reason"]) == ("PENDING", "approvers", wait["reason"])
    assert mine["regated"]["message"] == wait["reason"]
    # the trail says the same, once
    assert list(AuditEvent.objects.filter(confirmation_id=pending.confirmation_id, status="REGATED")
                .values_list("message", flat=True)) == [wait["reason"]]

    # and the approvers can still carry it out, once
    for approver in (approver1, approver2):
        with django_capture_on_commit_callbacks(execute=True):
            assert _api(approver).post(f"/api/v1/approvals/{pending.confirmation_id}/approve/", {},
                                       format="json").status_code == 200
    assert Cancellation.objects.count() == 1
    assert _told(requester, first.run.pk)["mine"][0]["regated"]["message"] == wait["reason"]  # history keeps it


def test_a_raised_quorum_tells_the_requester_how_many_approvals_count(requester, approver1, approver2,
                                                                     django_capture_on_commit_callbacks):
    run, request_id = _refund(requester)
    _api(approver1).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    Tool.objects.filter(name="refund_order").update(quorum=3)

    with django_capture_on_commit_callbacks(execute=True):
        assert _api(approver2).post(f"/api/v1/approvals/{request_id}/approve/", {},
                                    format="json").status_code == 200

    told = _told(requester, run.pk)
    assert not Refund.objects.exists()
    wait = _last_wait(told["events"])
    assert {k: wait["regated"][k] for k in ("cause", "quorum", "approvals")} == {
        "cause": "QUORUM_RAISED", "quorum": 3, "approvals": 2}
    assert wait["regated"]["message"] == ("The policy of refund_order became stricter after it was approved: it now "
                                          "needs 3 approvers and 2 of them count so far. Your request is waiting "
                                          "for the others.")
    assert wait["regated"]["message_zh"] == ("审批通过后 refund_order 的策略变得更严格：现在需要 3 位审批人，"
                                             "目前 2 位有效，您的请求正在等待其余审批人。")
    assert [(p["needs"], p["quorum"], p["approvals"]) for p in told["run"]["pending"]] == [("approvers", 3, 2)]
    assert told["mine"][0]["regated"]["message"] == wait["reason"]


def test_a_lapsed_approval_tells_the_requester_it_no_longer_counts(requester, approver1, approver2,
                                                                  django_capture_on_commit_callbacks):
    run, request_id = _refund(requester)
    _api(approver1).post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    User.objects.filter(pk=approver1.pk).update(is_active=False)  # the account was deactivated meanwhile

    with django_capture_on_commit_callbacks(execute=True):
        assert _api(approver2).post(f"/api/v1/approvals/{request_id}/approve/", {},
                                    format="json").status_code == 200

    told = _told(requester, run.pk)
    assert not Refund.objects.exists()
    wait = _last_wait(told["events"])
    assert {k: wait["regated"][k] for k in ("cause", "quorum", "approvals")} == {
        "cause": "APPROVALS_LAPSED", "quorum": 2, "approvals": 1}
    assert wait["regated"]["message"].startswith("Only 1 of the 2 approvals of refund_order still count")
    assert "只有 1 位仍然有效" in wait["regated"]["message_zh"]
    assert told["mine"][0]["regated"]["message"] == wait["reason"]


def test_a_request_never_regated_says_so(requester):
    run, _ = _refund(requester)

    told = _told(requester, run.pk)

    assert "regated" not in _last_wait(told["events"]) and told["mine"][0]["regated"] is None
