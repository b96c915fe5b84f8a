"""Workers that die or overrun in the middle of a tool execution: the side effect still happens
exactly once and the run ends in a defined state.

The workers' cancellation is slowed down by tests/integration/worker_app.py: it makes its change
inside the still-open transaction (consume + idempotency claim + order change), leaves a marker
file, then sleeps.
"""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from agentplatform.runtime.tasks import recover_stuck_runs
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.integration.conftest import wait_for
from tools.catalog.models import Cancellation, Order

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ORDER = "A202607290001"


def confirmed_cancellation(requester) -> tuple[Run, str]:
    """A cancellation the requester confirmed; its resume message is on its way to the broker."""
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was ordered twice")
    [pending] = outcome.pending
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    return outcome.run, pending.confirmation_id


def slow_worker_env(markers, seconds: float, **extra: str) -> dict[str, str]:
    return {"AGENTPLATFORM_TEST_SLOW_TOOL_SECONDS": str(seconds), "AGENTPLATFORM_TEST_MARKER_DIR": str(markers),
            **extra}


def test_worker_killed_mid_execution_leaves_nothing_and_recovery_executes_once(start_worker, requester,
                                                                                tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    # given: a worker whose cancellation hangs inside its transaction, with a short run lease
    doomed = start_worker(env=slow_worker_env(markers, 120, AGENT_RUN_LEASE_SECONDS="2"))
    run, request_id = confirmed_cancellation(requester)
    wait_for(lambda: any(markers.iterdir()), message="the cancellation to be under way", details=doomed.tail)

    # when: the worker is killed (SIGKILL, main process and pool) in the middle of the execution
    doomed.kill()

    # then: its uncommitted work is gone: no cancellation, the confirmation still CONFIRMED, the run
    # RUNNING with a lease that will expire
    assert Cancellation.objects.count() == 0
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONFIRMED
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING

    # when: a new worker runs the recovery sweep (as beat would) until the run is taken over
    healthy = start_worker()

    def recovered() -> Run | None:
        current = Run.objects.get(pk=run.pk)
        if current.status == Run.Status.RUNNING and healthy.count("runtime.recover_stuck_runs[") < 60:
            recover_stuck_runs.delay()
            return None
        return current if current.is_finished else None

    run = wait_for(recovered, interval=0.5, message="recovery to finish the run", details=healthy.tail)

    # then: the call ran exactly once, and the run finished normally
    assert run.status == Run.Status.COMPLETED, run.error_message
    assert "cancelled" in run.final_answer.lower()
    assert Cancellation.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.CANCELLED
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED
    assert len(list(markers.iterdir())) == 1  # the killed attempt; the recovered one ran unslowed
    assert AuditEvent.objects.filter(run_id=run.pk, decision="RECOVERED", status="RESUMED").count() == 1
    assert AuditEvent.objects.filter(run_id=run.pk, decision="EXECUTED", tool_name="cancel_order").count() == 1
    assert healthy.count("'recovered'") == 1, healthy.tail()


def test_resume_outliving_the_visibility_timeout_is_redelivered_and_executes_once(start_worker, requester,
                                                                                  tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    # given: a worker whose broker redelivers unacknowledged messages after 2 s (swept every second),
    # and whose cancellation takes 8 s
    worker = start_worker(env=slow_worker_env(markers, 8, CELERY_VISIBILITY_TIMEOUT="2",
                                              CELERY_UNACKED_RESTORE_INTERVAL="1",
                                              CELERY_UNACKED_RESTORE_THROTTLE="1"))

    # when: the resume task runs longer than the visibility timeout
    run, request_id = confirmed_cancellation(requester)
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status__in=(Run.Status.COMPLETED, Run.Status.FAILED))
                   .first(), message="the run to finish", details=worker.tail)

    # then: the message was delivered again while the first copy still ran, and that copy found
    # the run taken; the order was cancelled once
    task_id = wait_for(lambda: _redelivered_task_id(worker.log()), timeout=10, message="a redelivery",
                       details=worker.tail)
    assert worker.count(f"runtime.resume_run[{task_id}] received") >= 2, worker.tail()
    # the worker logs "succeeded" just after the run's last commit: wait for the line, not only the row
    wait_for(lambda: worker.count("'resumed'") >= 1, message="the resume's log line", details=worker.tail)
    assert worker.count("'resumed'") == 1 and worker.count("'skipped'") >= 1, worker.tail()
    assert run.status == Run.Status.COMPLETED, run.error_message
    assert Cancellation.objects.count() == 1
    assert len(list(markers.iterdir())) == 1
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED


def _redelivered_task_id(log: str) -> str | None:
    """The id of a task the worker received more than once, if any."""
    seen: set[str] = set()
    for line in log.splitlines():
        if "runtime.resume_run[" in line and line.endswith("received"):
            task_id = line.split("runtime.resume_run[", 1)[1].split("]", 1)[0]
            if task_id in seen:
                return task_id
            seen.add(task_id)
    return None
