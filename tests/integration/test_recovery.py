"""Recovery of stuck work, on any database (the real-worker SIGKILL case is in test_worker_crash.py).

A worker dying in the middle of a tool execution is simulated by a BaseException raised from the
business function after its change: nothing catches it, so it unwinds like a killed process
(the transaction rolls back, the run keeps its lease). The clock is `core.clock.now`.
"""
from __future__ import annotations

import datetime
import json
import socket

import pytest
from django.conf import settings as django_settings

from core import clock
from agentplatform.runtime import claims, services
from agentplatform.runtime.outcome import RunParked
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.tasks import recover_stuck_runs
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tools.catalog import services as catalog
from tools.catalog.models import Cancellation
from tools.idempotency import idempotency_execute
from tools.models import IdempotencyRecord
from tools.results import ToolResult

ORDER = "A202607290001"


class WorkerDied(BaseException):
    """Stands for SIGKILL: not an Exception, so no handler in the platform catches it."""


@pytest.fixture
def frozen_clock(monkeypatch):
    """clock.now() fixed at a moment the test moves: `frozen_clock.advance(seconds)`."""

    class Frozen:
        moment = clock.now()

        def advance(self, seconds: float) -> None:
            self.moment += datetime.timedelta(seconds=seconds)

    frozen = Frozen()
    monkeypatch.setattr(clock, "now", lambda: frozen.moment)
    return frozen


@pytest.fixture
def dying_cancellation(monkeypatch):
    """While on, the cancellation makes its change and then its worker "dies"."""
    real = catalog.order_cancel

    def order_cancel(**kwargs):
        real(**kwargs)
        raise WorkerDied()

    monkeypatch.setattr(catalog, "order_cancel", order_cancel)
    return lambda: monkeypatch.setattr(catalog, "order_cancel", real)


def crashed_resume(requester) -> tuple[Run, ConfirmationRequest]:
    """A confirmed cancellation whose resume died in the middle of the execution."""
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with pytest.raises(WorkerDied):
        services.chat_send(user=requester, message="yes", conversation_id=outcome.run.conversation_id,
                           confirmation_token=pending.token)
    return Run.objects.get(pk=outcome.run.pk), ConfirmationRequest.objects.get(pk=pending.confirmation_id)


def recovered_audit(run: Run) -> list[str]:
    return list(AuditEvent.objects.filter(run_id=run.pk, decision="RECOVERED").values_list("status", flat=True))


def test_a_run_whose_worker_died_mid_execution_is_recovered_and_executes_once(requester, frozen_clock,
                                                                              dying_cancellation):
    run, request = crashed_resume(requester)
    dying_cancellation()  # the next worker is healthy
    # the dead attempt left nothing: no cancellation, the confirmation unused, the run leased
    assert Cancellation.objects.count() == 0
    assert request.status == ConfirmationRequest.Status.CONFIRMED
    assert run.status == Run.Status.RUNNING and run.lease_expires_at > frozen_clock.moment

    # within its lease the run is left alone
    assert recover_stuck_runs.delay().get() == {"idempotency_records": 0, "runs": 0}

    # past its lease the sweep hands it to resume_run, which re-claims and continues it
    frozen_clock.advance(django_settings.AGENT_RUN_LEASE_SECONDS + 1)
    assert recover_stuck_runs.delay().get() == {"idempotency_records": 0, "runs": 1}

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED and "cancelled" in run.final_answer.lower()
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=request.pk).status == ConfirmationRequest.Status.CONSUMED
    assert recovered_audit(run) == ["RESUMED"]
    # and a later sweep has nothing left to do
    frozen_clock.advance(django_settings.AGENT_RUN_LEASE_SECONDS + 1)
    assert recover_stuck_runs.delay().get() == {"idempotency_records": 0, "runs": 0}
    assert Cancellation.objects.count() == 1


def test_a_worker_dying_after_the_execution_committed_is_recovered_without_executing_again(
        requester, frozen_clock, monkeypatch):
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was a mistake")
    [pending] = outcome.pending
    # given: the worker dies right after the cancellation committed, before the run saved its answer
    real_emit = EventRecorder.emit

    def emit(self, type_, payload=None):
        if type_ == RunEvent.Type.TOOL_EXECUTION_COMPLETED:
            raise WorkerDied()
        return real_emit(self, type_, payload)

    monkeypatch.setattr(EventRecorder, "emit", emit)
    with pytest.raises(WorkerDied):
        services.chat_send(user=requester, message="yes", conversation_id=outcome.run.conversation_id,
                           confirmation_token=pending.token)
    monkeypatch.setattr(EventRecorder, "emit", real_emit)
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.CONSUMED
    assert Run.objects.get(pk=outcome.run.pk).state["pending"]  # the run did not record the answer

    # when: recovery continues the run
    frozen_clock.advance(django_settings.AGENT_RUN_LEASE_SECONDS + 1)
    assert recover_stuck_runs.delay().get()["runs"] == 1

    # then: the call is answered from its idempotency record, not executed again
    run = Run.objects.get(pk=outcome.run.pk)
    assert run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    decisions = list(AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order",
                                               decision__in=["EXECUTED", "IDEMPOTENT_HIT"])
                     .order_by("occurred_at", "id").values_list("decision", flat=True))
    assert decisions == ["EXECUTED", "IDEMPOTENT_HIT"], decisions
    [answer] = [json.loads(m["content"]) for m in run.state["messages"] if m["role"] == "tool"]
    assert answer["success"] is True and answer["data"]["current_status"] == "CANCELLED"


def test_a_run_that_keeps_killing_its_worker_ends_failed_with_run_lease_expired(requester, frozen_clock,
                                                                                dying_cancellation, settings):
    settings.AGENT_RUN_LEASE_SECONDS = 10  # every recovery well within the confirmation's lifetime
    run, request = crashed_resume(requester)
    for _ in range(claims.MAX_RUN_RECOVERIES):
        frozen_clock.advance(11)
        with pytest.raises(WorkerDied):
            claims.run_recover(run_id=run.pk)

    frozen_clock.advance(11)
    assert recover_stuck_runs.delay().get()["runs"] == 1

    run.refresh_from_db()
    assert (run.status, run.error_code) == (Run.Status.FAILED, "RUN_LEASE_EXPIRED")
    assert run.events.filter(type=RunEvent.Type.ERROR, payload__code="RUN_LEASE_EXPIRED").count() == 1
    assert recovered_audit(run) == ["RESUMED"] * claims.MAX_RUN_RECOVERIES + ["RUN_LEASE_EXPIRED"]
    assert Cancellation.objects.count() == 0
    # no request is left CONFIRMED on a finished run: it ends with the run, with the reason
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    assert (stored.status, stored.outcome_code) == (ConfirmationRequest.Status.CANCELLED, "RUN_ENDED")
    assert "RUN_LEASE_EXPIRED" in stored.decision_reason


def test_a_lost_resume_message_is_found_by_the_sweep(requester, frozen_clock):
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was a mistake")
    [pending] = outcome.pending
    # the decision commits but its resume never runs (on-commit callbacks are not executed here,
    # as when the broker was down at that moment)
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.AWAITING_CONFIRMATION

    assert recover_stuck_runs.delay().get()["runs"] == 0  # it may still be on its way
    frozen_clock.advance(61)
    assert recover_stuck_runs.delay().get()["runs"] == 1

    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1


def test_a_processing_record_past_its_lease_becomes_outcome_unknown_for_an_admin(people, acme_admin, client,
                                                                                 frozen_clock):
    # given: a claim committed before a remote side effect whose caller then died (no service
    # leaves one behind for local changes, so it is written directly), and a fresh one
    tenant = acme_admin.tenant
    lease = django_settings.TOOLS_IDEMPOTENCY_LEASE_SECONDS
    stuck = IdempotencyRecord.objects.create(
        tenant=tenant, key="k-stuck", tool_name="cancel_order", arguments_hash="a" * 64,
        locked_at=frozen_clock.moment - datetime.timedelta(seconds=lease + 1))
    fresh = IdempotencyRecord.objects.create(
        tenant=tenant, key="k-fresh", tool_name="cancel_order", arguments_hash="b" * 64,
        locked_at=frozen_clock.moment - datetime.timedelta(seconds=lease - 1))

    assert recover_stuck_runs.delay().get() == {"idempotency_records": 1, "runs": 0}

    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert (stuck.status, fresh.status) == (IdempotencyRecord.Status.OUTCOME_UNKNOWN,
                                            IdempotencyRecord.Status.PROCESSING)
    [event] = AuditEvent.objects.filter(decision="RECOVERED")
    assert (event.status, event.idempotency_key, event.tenant_id) == ("OUTCOME_UNKNOWN", "k-stuck", tenant.pk)
    # never run again automatically: a replay answers OUTCOME_UNKNOWN without running the action
    ran = []
    outcome = idempotency_execute(tenant_id=tenant.pk, key="k-stuck", tool_name="cancel_order",
                                  arguments_hash="a" * 64, action=lambda: ran.append(1) or (ToolResult.ok({}), ""))
    assert (outcome.kind, outcome.result.code, ran) == ("OUTCOME_UNKNOWN", "OUTCOME_UNKNOWN", [])
    # an administrator finds it with the admin's status filter
    client.force_login(acme_admin)
    page = client.get("/admin/tools/idempotencyrecord/", {"status__exact": "OUTCOME_UNKNOWN"})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1 and list(page.context["cl"].result_list) == [stuck]
    # a second sweep changes nothing
    assert recover_stuck_runs.delay().get()["idempotency_records"] == 0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def model_outage(settings):
    """outage(True): the model endpoint refuses connections (the SDK gives up at once);
    outage(False): the offline model answers again."""

    def outage(down: bool) -> None:
        settings.LLM_API_KEY = "sk-test" if down else ""
        settings.LLM_BASE_URL = f"http://127.0.0.1:{closed_port()}/v1"
        settings.LLM_MODEL = "gpt-4o-mini" if down else "offline-planner"
        settings.LLM_MAX_RETRIES = 0

    return outage


def confirmed_run(requester) -> Run:
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was a mistake")
    requester_actions.confirmation_confirm(token=outcome.pending[0].token, user=requester)  # resume not run here
    return outcome.run


def test_a_model_outage_parks_the_run_and_a_later_attempt_continues_without_repeating_the_call(requester,
                                                                                               model_outage):
    run = confirmed_run(requester)
    model_outage(True)

    with pytest.raises(RunParked):
        claims.run_resume(run_id=run.pk, park_on_model_error=True)

    run.refresh_from_db()
    assert (run.status, run.lease_expires_at) == (Run.Status.RUNNING, None)  # parked
    assert Cancellation.objects.count() == 1  # the approved call ran before the model was needed
    model_outage(False)  # the endpoint is back
    outcome = claims.run_resume(run_id=run.pk, park_on_model_error=True)
    assert outcome is not None and outcome.run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    assert AuditEvent.objects.filter(run_id=run.pk, decision="EXECUTED").count() == 1


def test_the_last_attempt_during_a_model_outage_fails_the_run_with_model_unavailable(requester, model_outage):
    run = confirmed_run(requester)
    model_outage(True)
    with pytest.raises(RunParked):
        claims.run_resume(run_id=run.pk, park_on_model_error=True)

    outcome = claims.run_resume(run_id=run.pk, park_on_model_error=False)  # the task's last retry

    assert outcome is not None
    assert (outcome.run.status, outcome.run.error_code) == (Run.Status.FAILED, "MODEL_UNAVAILABLE")
    assert Cancellation.objects.count() == 1
