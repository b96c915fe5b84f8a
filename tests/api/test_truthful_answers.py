"""Truthful answers to the client (docs/decisions.md): a retryable run
failure does not pin its Idempotency-Key, an error body names the run whose outcome the client can
read, a committed decision is answered as committed even when its resume cannot be enqueued, and a
holder that lost its run can neither execute nor collide on event numbers."""
from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import OperationalError
from rest_framework.test import APIClient

from core import clock
from agentplatform.runtime import ending, leases, resume, services
from agentplatform.runtime.context import build_tool_context
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Run, RunEvent
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from tests.llm.fake_openai_server import error_response
from tests.tools.support import ORDER, model  # noqa: F401 - fixture
from tools.catalog.models import Cancellation
from tools.context import FenceLost
from tools.manager import ToolCallingManager


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_run_failed_by_a_model_outage_does_not_keep_the_idempotency_key(requester, model):
    model.server.enqueue(error_response(500, "upstream down", type="server_error", headers={"x-should-retry": "false"}))
    headers = {"HTTP_IDEMPOTENCY_KEY": "retry-me-1"}

    first = _api(requester).post("/api/v1/chat/", {"message": "hello"}, format="json", **headers)
    assert first.status_code == 200
    assert first.json()["status"] == "FAILED" and first.json()["error"]["retryable"] is True

    model.says("Hello again.")  # the endpoint recovered
    second = _api(requester).post("/api/v1/chat/", {"message": "hello"}, format="json", **headers)

    assert second.status_code == 200 and "Idempotent-Replayed" not in second
    assert second.json()["status"] == "COMPLETED" and second.json()["run_id"] != first.json()["run_id"]


def test_a_database_failure_after_work_committed_names_the_run_and_frees_the_key(requester, monkeypatch):
    real_finish = ending.finish

    def connection_dropped(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(ending, "finish", connection_dropped)
    headers = {"HTTP_IDEMPOTENCY_KEY": "db-drop-1"}
    response = _api(requester).post("/api/v1/chat/", {"message": "list my orders"}, format="json", **headers)

    body = response.json()
    assert response.status_code == 503 and body["code"] == "DATABASE_BUSY" and body["retryable"] is True
    run = Run.objects.get(pk=body["run_id"])  # the client can read the real state of its run
    assert run.user_id == requester.pk and "stays done" in body["message"]
    # the key was released: the retry runs instead of answering 409 IN_PROGRESS
    monkeypatch.setattr(ending, "finish", real_finish)
    again = _api(requester).post("/api/v1/chat/", {"message": "list my orders"}, format="json", **headers)
    assert again.status_code == 200 and again.json()["status"] == "COMPLETED"


def test_error_bodies_of_confirm_and_approve_name_the_run(requester, approver1, monkeypatch):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    token = first.pending[0].token
    assert _api(requester).post("/api/v1/confirmations/cancel/", {"token": token}, format="json").status_code == 200

    replay = _api(requester).post("/api/v1/confirmations/confirm/", {"token": token}, format="json")
    assert (replay.status_code, replay.json()["code"]) == (409, "ALREADY_DECIDED")
    assert replay.json()["run_id"] == str(first.run.pk)

    refund = services.chat_send(user=requester, message="refund A202607290003 amount 10 because broken")
    request = ConfirmationRequest.objects.get(pk=refund.pending[0].confirmation_id)
    monkeypatch.setattr(clock, "now", lambda: request.expires_at + datetime.timedelta(seconds=1))
    late = _api(approver1).post(f"/api/v1/approvals/{request.pk}/approve/", {}, format="json")
    assert (late.status_code, late.json()["code"]) == (410, "CONFIRMATION_EXPIRED")
    assert late.json()["run_id"] == str(refund.run.pk)


def test_a_committed_decision_is_answered_as_committed_when_the_broker_is_down(transactional_db, requester,
                                                                             monkeypatch):
    from kombu.exceptions import OperationalError as BrokerDown


    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")

    def broker_down(*args, **kwargs):
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(resume.resume_run, "delay", broker_down)
    response = _api(requester).post("/api/v1/confirmations/confirm/", {"token": first.pending[0].token},
                                    format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["run_status"]) == ("CONFIRMED", "AWAITING_CONFIRMATION")
    assert not Cancellation.objects.exists()
    # the resume is left to recovery, which executes the decision once
    monkeypatch.undo()
    assert services.run_continue(run_id=first.run.pk).run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1


def test_a_holder_whose_run_was_taken_over_executes_nothing(requester):
    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    requester_actions.confirmation_confirm(token=first.pending[0].token, user=requester)
    # holder A claims the run (as a resume does) ...
    Run.objects.filter(pk=first.run.pk).update(status=Run.Status.RUNNING, lease_expires_at=leases.new_lease())
    stale = Run.objects.get(pk=first.run.pk)
    # ... and loses it: its lease ran out and recovery claimed the run with a lease of its own
    Run.objects.filter(pk=stale.pk).update(lease_expires_at=clock.now() + datetime.timedelta(seconds=999))
    pending = stale.state["pending"]
    ctx = build_tool_context(stale, confirmations={k: uuid.UUID(v) for k, v in pending.items()})

    with pytest.raises(FenceLost):
        ToolCallingManager().execute_tool_calls(ctx, stale.state["messages"][stale.state["assistant_index"]],
                                                only=set(pending))

    assert not Cancellation.objects.exists()
    assert ConfirmationRequest.objects.get(pk=first.pending[0].confirmation_id).status == "CONFIRMED"


def test_two_holders_never_collide_on_event_sequence_numbers(transactional_db, requester):
    first = services.chat_send(user=requester, message="list my orders")
    run = Run.objects.get(pk=first.run.pk)
    stale, fresh = EventRecorder(run), EventRecorder(run)  # both believe they write the next seq

    fresh.emit(RunEvent.Type.MODEL_TEXT, {"text": "new holder"})
    stale.emit(RunEvent.Type.MODEL_TEXT, {"text": "old holder"})

    seqs = list(run.events.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_the_web_sweep_recovers_a_run_whose_holder_died_without_beat(requester, monkeypatch,
                                                                     django_capture_on_commit_callbacks):
    from agentplatform.runtime.settle import sweep_once

    first = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    with django_capture_on_commit_callbacks(execute=False):  # the resume message is lost with the worker
        requester_actions.confirmation_confirm(token=first.pending[0].token, user=requester)
    # the worker claimed the run and was killed (SIGKILL) before doing anything
    Run.objects.filter(pk=first.run.pk).update(status=Run.Status.RUNNING, lease_expires_at=leases.new_lease())
    assert sweep_once()["runs"] == 0  # its lease still runs: nobody else touches it

    later = Run.objects.get(pk=first.run.pk).lease_expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert sweep_once()["runs"] == 1  # eagerly, the pushed resume recovers it right here

    run = Run.objects.get(pk=first.run.pk)
    assert run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
