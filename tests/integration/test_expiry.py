"""Expiry at the boundary, the `approvals.expire_confirmations` task, late decisions, and what the
model is told. Runs on any database: the clock is `core.clock.now`,
patched; the resume enqueued on commit runs eagerly (no broker)."""
from __future__ import annotations

import datetime
import json

import pytest
from rest_framework.test import APIClient

from core import clock
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions, requester_actions
from approvals.errors import ConfirmationExpired
from approvals.models import ConfirmationRequest
from approvals.tasks import expire_confirmations
from tools.catalog.models import Cancellation, Refund

Status = ConfirmationRequest.Status
CANCEL_ORDER = "A202607290001"
REFUND_ORDER = "A202607290003"
SECOND = datetime.timedelta(seconds=1)


def set_clock(monkeypatch, moment: datetime.datetime) -> None:
    monkeypatch.setattr(clock, "now", lambda: moment)


def waiting_cancellation(requester):
    outcome = services.chat_send(user=requester, message=f"cancel {CANCEL_ORDER} because it was a mistake")
    [pending] = outcome.pending
    return outcome.run, pending, ConfirmationRequest.objects.get(pk=pending.confirmation_id)


def tool_answers(run_id) -> list[dict]:
    """The tool results the model was given in this run (decoded ToolResult envelopes)."""
    run = Run.objects.get(pk=run_id)
    return [json.loads(m["content"]) for m in run.state["messages"] if m["role"] == "tool"]


def test_a_confirmation_is_consumable_one_second_before_it_expires(requester, monkeypatch):
    run, pending, request = waiting_cancellation(requester)
    set_clock(monkeypatch, request.expires_at - SECOND)

    done = services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                              confirmation_token=pending.token)

    assert done.run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=request.pk).status == Status.CONSUMED
    assert [a["code"] for a in tool_answers(run.pk)] == ["OK"]


def test_confirmed_in_time_but_resumed_one_second_late_still_runs_once(requester, monkeypatch,
                                                                       django_capture_on_commit_callbacks):
    # docs/decisions.md: the TTL bounds how long a human may take to decide; a decision made in
    # time is never relabelled EXPIRED, and runs (once) when its turn settles.
    run, pending, request = waiting_cancellation(requester)
    # given: the requester confirms one second before expiry, and the resume is held up
    set_clock(monkeypatch, request.expires_at - SECOND)
    with django_capture_on_commit_callbacks() as resume_later:
        requester_actions.confirmation_confirm(token=pending.token, user=requester)
    assert ConfirmationRequest.objects.get(pk=request.pk).status == Status.CONFIRMED
    assert len(resume_later) == 1

    # when: the sweep runs one second after expiry, then the resume
    set_clock(monkeypatch, request.expires_at + SECOND)
    assert expire_confirmations.delay().get() == 0
    resume_later[0]()

    # then: the confirmed call executed once, and the model was told the truth
    assert Cancellation.objects.count() == 1
    [answer] = tool_answers(run.pk)
    assert (answer["success"], answer["code"]) == (True, "OK")
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    assert (stored.status, stored.outcome_code) == (Status.CONSUMED, "OK")


def test_the_expiry_task_expires_at_plus_one_second_and_the_model_hears_expired_not_rejected(
        requester, monkeypatch, django_capture_on_commit_callbacks):
    expired_run, _, expired_request = waiting_cancellation(requester)
    rejected_run = services.chat_send(user=requester, message=f"cancel {REFUND_ORDER} because I am not sure")
    [rejected_pending] = rejected_run.pending

    # one second before expiry the sweep leaves the request alone
    set_clock(monkeypatch, expired_request.expires_at - SECOND)
    assert expire_confirmations.delay().get() == 0
    assert ConfirmationRequest.objects.get(pk=expired_request.pk).status == Status.PENDING
    # the other request is declined by the requester, still in time
    with django_capture_on_commit_callbacks(execute=True):
        requester_actions.confirmation_cancel(token=rejected_pending.token, user=requester)

    # one second after expiry the sweep expires it, and the run resumes on commit
    set_clock(monkeypatch, expired_request.expires_at + SECOND)
    with django_capture_on_commit_callbacks(execute=True):
        assert expire_confirmations.delay().get() == 1

    assert ConfirmationRequest.objects.get(pk=expired_request.pk).status == Status.EXPIRED
    [expired_answer] = tool_answers(expired_run.pk)
    [rejected_answer] = tool_answers(rejected_run.run.pk)
    assert (expired_answer["success"], expired_answer["code"]) == (False, "CONFIRMATION_EXPIRED")
    assert (rejected_answer["success"], rejected_answer["code"]) == (False, "REJECTED")
    expired_text = Run.objects.get(pk=expired_run.pk).final_answer.lower()
    rejected_text = Run.objects.get(pk=rejected_run.run.pk).final_answer.lower()
    assert "expired" in expired_text and "reject" not in expired_text
    assert "reject" in rejected_text and "expired" not in rejected_text
    assert Cancellation.objects.count() == 0
    # a second sweep finds nothing more to do
    assert expire_confirmations.delay().get() == 0


def test_a_late_approval_answers_410_expired_and_the_model_is_told(requester, approver1, approver2, monkeypatch,
                                                                   django_capture_on_commit_callbacks):
    outcome = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} because it arrived broken")
    [pending] = outcome.pending
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    set_clock(monkeypatch, request.expires_at - SECOND)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver1)  # in time: 1 of 2

    set_clock(monkeypatch, request.expires_at + SECOND)
    # the refused decision expires the request on the spot; the run resumes on that commit
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ConfirmationExpired) as raised:
        approver_actions.confirmation_approve(request_id=request.pk, approver=approver2)
    assert (raised.value.code, raised.value.http_status) == ("CONFIRMATION_EXPIRED", 410)

    # the API answers the same late decision 410 with the error body
    client = APIClient()
    client.force_authenticate(user=approver2)
    response = client.post(f"/api/v1/approvals/{request.pk}/approve/", {}, format="json")
    assert response.status_code == 410
    assert response.json()["code"] == "CONFIRMATION_EXPIRED"

    assert ConfirmationRequest.objects.get(pk=request.pk).status == Status.EXPIRED
    assert not Refund.objects.exists()
    [answer] = tool_answers(outcome.run.pk)
    assert (answer["success"], answer["code"]) == (False, "CONFIRMATION_EXPIRED")
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.COMPLETED
