"""A holder that lost its run's lease never executes, and every side effect names the holder that
made it (docs/operations.md, "Runs, leases and recovery").

Real processes on PostgreSQL: the first holder is a `celery worker` (its runs have a lease of 3 s);
the recoverer is this test process (`claims.run_recover`, what the sweep's `resume_run` calls), so
the two holders are two processes with their own pids. The first holder is paused for real: SIGSTOP
of its whole process group, or a model stream (tests/llm/fake_openai_server.py) held past its
lease; the test waits on database state and files, not on sleeps.

Every scenario ends with the same audit of the run's side effects (`assert_every_change_recorded`):
each cancellation has exactly one EXECUTED row, naming its call (tool_call_id) and the process and
lease that ran it, and no row of the stopped holder was written after it lost its lease.
"""
from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import threading

import pytest
from django.conf import settings as django_settings

from core import clock
from agentplatform.runtime import claims, services
from agentplatform.runtime.outcome import RunOutcome
from agentplatform.runtime.models import Run
from approvals import requester_actions
from audit.models import AuditEvent
from tests.integration.conftest import Worker, wait_for
from tests.llm.fake_openai_server import FakeOpenAIServer, turn_response
from tools.catalog.models import Cancellation, Order
from tools.models import Tool

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ORDER = "A202607290001"  # acme, PAID
LEASE_SECONDS = 3
HOST = socket.gethostname()


def pool_pid(worker: Worker) -> int:
    """The pid of the only pool process of a `--concurrency=1` worker (the process that runs tasks)."""
    def child() -> int | None:
        found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(worker.process.pid)], capture_output=True,
                               text=True).stdout.split()
        return int(found[0]) if len(found) == 1 else None

    return wait_for(child, message="the worker's pool process", details=worker.tail)


def stop(worker: Worker) -> None:
    os.killpg(worker.process.pid, signal.SIGSTOP)


def resume(worker: Worker) -> None:
    os.killpg(worker.process.pid, signal.SIGCONT)


def lease_of(run_id) -> datetime.datetime:
    return Run.objects.values_list("lease_expires_at", flat=True).get(pk=run_id)


def recover_once_expired(run_id, lease: datetime.datetime) -> RunOutcome:
    """Wait until `lease` has expired, then take the run over in this process, as the recovery
    sweep's resume_run would."""
    wait_for(lambda: clock.now() > lease, timeout=LEASE_SECONDS + 30, message="the first holder's lease to expire")
    outcome = claims.run_recover(run_id=run_id)
    assert outcome is not None, "recovery did not take the run over"
    return outcome


def taken_over_at(run_id) -> datetime.datetime:
    """When recovery took the run over (its RECOVERED audit row, written right after the claim)."""
    return AuditEvent.objects.get(run_id=run_id, decision="RECOVERED").occurred_at


def assert_every_change_recorded(run: Run, *, stale_holder: str, lost_at: datetime.datetime) -> None:
    """Every cancellation of the run's tenant has exactly one EXECUTED row naming its call and the
    holder that ran it; the order is CANCELLED exactly when a cancellation exists; and no audit row
    of `stale_holder` was written after `lost_at` (the moment recovery took its run)."""
    executed = list(AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order", decision="EXECUTED"))
    for cancellation in Cancellation.objects.filter(tenant_id=run.tenant_id):
        rows = [e for e in executed if e.business_result_id == str(cancellation.pk)]
        assert len(rows) == 1, f"cancellation {cancellation.pk} has {len(rows)} EXECUTED rows"
        [row] = rows
        assert row.tool_call_id, "an EXECUTED row without its call id"
        assert row.execution and row.execution["holder"].startswith(f"{HOST}:"), row.execution
        assert row.execution["lease"], "an execution inside a run names the lease it ran under"
    assert len(executed) == Cancellation.objects.filter(tenant_id=run.tenant_id).count(), \
        "an EXECUTED row without its business change"
    order = Order.objects.get(tenant_id=run.tenant_id, order_id=ORDER)
    cancelled = Cancellation.objects.filter(order=order).exists()
    assert (order.status == Order.Status.CANCELLED) == cancelled, (order.status, cancelled)
    late = AuditEvent.objects.filter(run_id=run.pk, occurred_at__gt=lost_at, execution__holder=stale_holder)
    assert not late.exists(), [(e.decision, e.tool_call_id, e.execution) for e in late]


def wait_superseded(worker: Worker) -> None:
    """The first holder's task ends telling it lost the run (resume.resume_run: "superseded")."""
    wait_for(lambda: worker.count("was taken over by recovery") >= 1, timeout=90,
             message="the stale holder to stop", details=worker.tail)
    wait_for(lambda: worker.count("'superseded'") >= 1, message="the stale holder's task to end",
             details=worker.tail)


def test_a_holder_stopped_before_it_consumes_a_confirmed_call_never_executes_it(start_worker, requester,
                                                                                settings, tmp_path):
    # given: a cancellation the requester confirmed, resumed by a worker that holds the run (lease of
    # 3 s) and is about to consume and execute it
    settings.AGENT_RUN_LEASE_SECONDS = LEASE_SECONDS
    pause = tmp_path / "pause"
    pause.mkdir()
    entered = tmp_path / "entered"  # a file for every time the worker enters the cancellation
    entered.mkdir()
    first = start_worker(concurrency=1, env={"AGENT_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
                                             "AGENTPLATFORM_TEST_PAUSE_DIR": str(pause),
                                             "AGENTPLATFORM_TEST_MARKER_DIR": str(entered)})
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was ordered twice")
    [pending] = outcome.pending
    requester_actions.confirmation_confirm(token=pending.token, user=requester)  # its resume goes to the worker
    marker = wait_for(lambda: next(pause.glob("paused-*"), None), message="the worker to hold the run",
                      details=first.tail)
    stale_holder = f"{HOST}:{marker.name.split('-', 1)[1]}"

    # when: the holder is stopped (SIGSTOP) with its lease held, the lease expires, and this
    # process recovers the run; then the stopped holder is let go and continued (SIGCONT)
    stop(first)
    (pause / "go").touch()  # it may go on once it runs again
    held = lease_of(outcome.run.pk)
    recovered = recover_once_expired(outcome.run.pk, held)
    lost_at = taken_over_at(outcome.run.pk)
    resume(first)
    wait_superseded(first)

    # then: the recoverer executed the call once, under its own lease; the stopped holder never
    # even entered the tool (not only: its work was rolled back)
    assert list(entered.iterdir()) == []
    run = Run.objects.get(pk=outcome.run.pk)
    assert recovered.run.status == run.status == Run.Status.COMPLETED, run.error_message
    assert Cancellation.objects.count() == 1
    [row] = AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order", decision="EXECUTED")
    assert row.tool_call_id == pending.tool_call_id
    assert row.execution["holder"] == f"{HOST}:{os.getpid()}" != stale_holder
    assert row.execution["lease"] != held.isoformat()
    assert_every_change_recorded(run, stale_holder=stale_holder, lost_at=lost_at)


def test_a_holder_stopped_inside_its_execution_keeps_the_run_and_recovery_waits_for_it(start_worker, requester,
                                                                                       settings, tmp_path):
    # given: a confirmed cancellation whose worker (lease of 3 s) is stopped (SIGSTOP) inside the
    # execution's transaction: the order changed, nothing committed, the run's row locked by the fence
    settings.AGENT_RUN_LEASE_SECONDS = LEASE_SECONDS
    entered = tmp_path / "entered"
    entered.mkdir()
    first = start_worker(concurrency=1, env={"AGENT_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
                                             "AGENTPLATFORM_TEST_SLOW_TOOL_SECONDS": "8",
                                             "AGENTPLATFORM_TEST_MARKER_DIR": str(entered)})
    holder = f"{HOST}:{pool_pid(first)}"
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was ordered twice")
    [pending] = outcome.pending
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    wait_for(lambda: any(entered.iterdir()), message="the execution to be under way", details=first.tail)
    stop(first)
    held = lease_of(outcome.run.pk)

    # when: its lease expires and this process tries to recover the run
    wait_for(lambda: clock.now() > held, timeout=LEASE_SECONDS + 30, message="the lease to expire")
    recovered: list = []

    def recover() -> None:
        from django.db import connection

        try:
            recovered.append(claims.run_recover(run_id=outcome.run.pk))
        finally:
            connection.close()

    recoverer = threading.Thread(target=recover)
    recoverer.start()
    recoverer.join(timeout=3)
    waited = recoverer.is_alive()  # the claim waits for the stopped holder's transaction
    resume(first)
    recoverer.join(timeout=60)
    run = wait_for(lambda: Run.objects.filter(pk=outcome.run.pk, status=Run.Status.COMPLETED).first(),
                   timeout=60, message="the holder to finish the run", details=first.tail)

    # then: the claim waited and then found the run renewed by its holder, which executed the call
    # once under its own lease and finished the run
    assert waited and recovered == [None]
    assert Cancellation.objects.count() == 1 and len(list(entered.iterdir())) == 1
    [row] = AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order", decision="EXECUTED")
    assert (row.tool_call_id, row.execution) == (pending.tool_call_id, {"holder": holder, "lease": held.isoformat()})
    assert not AuditEvent.objects.filter(run_id=run.pk, decision="RECOVERED").exists()
    assert_every_change_recorded(run, stale_holder=holder, lost_at=clock.now())


@pytest.fixture
def fake_model(settings):
    """A scripted OpenAI-compatible endpoint for this process and the workers' environment."""
    with FakeOpenAIServer() as server:
        settings.LLM_API_KEY, settings.LLM_BASE_URL, settings.LLM_MODEL = "sk-test", server.url, "gpt-4o-mini"
        settings.LLM_MAX_RETRIES, settings.LLM_STREAM = 0, True
        server.env = {"LLM_API_KEY": "sk-test", "LLM_BASE_URL": server.url, "LLM_MODEL": "gpt-4o-mini",
                      "LLM_MAX_RETRIES": "0", "LLM_STREAM": "true", "LLM_TIMEOUT_SECONDS": "150",
                      "LLM_DEADLINE_SECONDS": "200", "AGENT_RUN_LEASE_SECONDS": str(LEASE_SECONDS)}
        yield server


@pytest.mark.parametrize("paused_by", ["a stream held past the lease", "SIGSTOP during the stream"])
def test_a_holder_whose_model_answer_arrives_after_it_lost_the_lease_executes_nothing(
        start_worker, requester, settings, fake_model, paused_by, tmp_path):
    # given: cancel_order runs without confirmation (an operator's choice), so the call the first
    # holder's model streams would change the order at once
    settings.AGENT_RUN_LEASE_SECONDS = LEASE_SECONDS
    Tool.objects.filter(name="cancel_order").update(policy_override="NONE")
    hold = threading.Event()
    arguments = f'{{"order_id": "{ORDER}", "reason": "ordered twice"}}'
    stalled = turn_response(stream=True, calls=[{"id": "call_stale", "name": "cancel_order", "arguments": arguments}])
    stalled.hold, stalled.hold_after = hold, 2  # the call's name is out, its arguments wait
    fake_model.enqueue(stalled, turn_response(stream=True, content="Nothing was changed; the order stays as it is."))
    entered = tmp_path / "entered"  # a file for every time the worker enters the cancellation
    entered.mkdir()
    first = start_worker(concurrency=1, env={**fake_model.env, "AGENTPLATFORM_TEST_MARKER_DIR": str(entered)})
    stale_holder = f"{HOST}:{pool_pid(first)}"

    # when: a worker drives the run; its model's answer stalls mid-stream (and, in one variant, the
    # worker is stopped), the lease expires, and this process recovers the run, whose model
    # answers in plain text; then the first holder's stream completes (and the worker continues)
    run = services.chat_start(user=requester, message=f"cancel {ORDER} because it was ordered twice")
    wait_for(lambda: len(fake_model.requests) == 1, message="the first holder's model call", details=first.tail)
    if paused_by.startswith("SIGSTOP"):
        stop(first)
    held = wait_for(lambda: lease_of(run.pk), message="the first holder's lease")
    recovered = recover_once_expired(run.pk, held)
    lost_at = taken_over_at(run.pk)
    hold.set()
    if paused_by.startswith("SIGSTOP"):
        resume(first)
    wait_superseded(first)

    # then: the run is the recoverer's; the streamed call never ran (the tool was not even entered,
    # so a side effect outside the database could not have happened either), nor was it recorded
    assert list(entered.iterdir()) == []
    run = Run.objects.get(pk=run.pk)
    assert recovered.run.status == run.status == Run.Status.COMPLETED, run.error_message
    assert run.final_answer.startswith("Nothing was changed")
    assert Cancellation.objects.count() == 0
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    assert not AuditEvent.objects.filter(run_id=run.pk, tool_call_id="call_stale").exists()
    assert all(m.get("tool_call_id") != "call_stale" for m in run.state["messages"])
    assert_every_change_recorded(run, stale_holder=stale_holder, lost_at=lost_at)
    assert django_settings.AGENT_RUN_LEASE_SECONDS == LEASE_SECONDS
