"""A run's writes are fenced by its lease: once recovery took the run over, the old holder's save
raises RunClaimLost instead of overwriting the new holder's state (agentplatform.runtime.step.HeldRun.save)."""
from __future__ import annotations

import datetime

import pytest
from django.conf import settings

from core import clock
from agentplatform.runtime import claims, ending, leases, services
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.step import HeldRun, Step
from agentplatform.runtime.models import Run
from approvals import requester_actions
from tests.tools.support import ORDER, resume_not_enqueued
from tools.context import FenceLost


def test_the_old_holder_cannot_save_after_a_takeover(requester):
    # given: a waiting run, confirmed and claimed by this process
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with resume_not_enqueued():
        requester_actions.confirmation_confirm(token=pending.token, user=requester)
    claimed = claims.claim_decided(outcome.run.pk)
    assert claimed is not None
    run = claimed.run
    held = HeldRun(run, EventRecorder(run, last_seq=claimed.last_seq))
    run.state["note"] = "mine"
    held.save("state")  # the holder saves and renews its lease

    # when: another worker recovers the run (a new lease), then the old holder saves again
    Run.objects.filter(pk=run.pk).update(lease_expires_at=clock.now() + datetime.timedelta(seconds=999))
    run.state["note"] = "stale"

    # then: refused, and the stored state is the one before the takeover
    with pytest.raises(leases.RunClaimLost):
        held.save("state")
    assert Run.objects.get(pk=run.pk).state["note"] == "mine"


def test_failing_a_run_locks_its_row_before_its_requests_and_a_step_that_rolled_back_keeps_the_lease(requester):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from approvals.models import ConfirmationRequest

    # given: a waiting run, claimed by this process, whose request is still open
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    Run.objects.filter(pk=outcome.run.pk).update(status=Run.Status.AWAITING_CONFIRMATION)
    run = Run.objects.get(pk=outcome.run.pk)
    lease = clock.now() + datetime.timedelta(seconds=60)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, lease_expires_at=lease)
    run.status, run.lease_expires_at = Run.Status.RUNNING, lease
    held = HeldRun(run, EventRecorder(run))

    # when: a step that saved the run (a new lease, held until the step ends) rolls back ...
    with pytest.raises(FenceLost), Step.begin(held) as step:
        step.save_run("state")
        assert run.lease_expires_at != lease
        raise FenceLost("the step is abandoned")
    # ... the run keeps the lease its row has, so the run can still be failed by its holder
    assert run.lease_expires_at == Run.objects.get(pk=run.pk).lease_expires_at

    with CaptureQueriesContext(connection) as captured:
        ending.fail(held, "SYSTEM_ERROR", "stopped")

    # then: the run's row is locked before any request is (the order run_cancel and a consumption
    # use: no deadlock between them), and the run is FAILED with its request cancelled
    statements = [q["sql"] for q in captured.captured_queries]
    # (the lock read: FOR NO KEY UPDATE on PostgreSQL; SQLite locks the database on write instead)
    run_lock = next(i for i, sql in enumerate(statements) if sql.startswith('SELECT "runtime_run"."id" FROM'))
    first_request = next(i for i, sql in enumerate(statements) if "approvals_confirmationrequest" in sql)
    assert run_lock < first_request
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
    assert not ConfirmationRequest.objects.filter(run_id=run.pk, status=ConfirmationRequest.Status.PENDING).exists()


def test_a_consumption_whose_writes_fail_ends_the_run_once_and_is_not_retried(requester, monkeypatch):
    import datetime as dt

    from django.db import connection

    from agentplatform.runtime.recovery import runs_needing_push
    from approvals.models import ConfirmationRequest
    from tools.catalog import services as catalog

    # given: a confirmed call whose consumption step cannot write its end (a rejected row in the
    # step's one statement; on SQLite a failing statement in its place)
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with resume_not_enqueued():
        requester_actions.confirmation_confirm(token=pending.token, user=requester)
    bodies = []
    real_cancel, real_write = catalog.order_cancel, Step._write

    def counted(**kwargs):
        bodies.append(kwargs["order_id"])  # stands for an effect outside the database
        return real_cancel(**kwargs)

    def failing(step):
        if any(m.get("role") == "tool" for m in step.messages):
            with connection.cursor() as cursor:
                cursor.execute("SELECT * FROM a_table_that_does_not_exist")
        return real_write(step)

    monkeypatch.setattr(catalog, "order_cancel", counted)
    monkeypatch.setattr(Step, "_write", failing)

    # when: resumed, then resumed again as a retry or the recovery sweep would, an hour later
    with pytest.raises(Exception):
        claims.run_resume(run_id=outcome.run.pk)
    an_hour_ago = clock.now() - dt.timedelta(hours=1)
    Run.objects.filter(pk=outcome.run.pk).update(updated_at=an_hour_ago)
    ConfirmationRequest.objects.filter(pk=pending.confirmation_id).update(decided_at=an_hour_ago)
    again = claims.run_resume(run_id=outcome.run.pk)

    # then: the run ended FAILED on the first attempt with its request cancelled, the tool's body
    # ran once, and nothing pushes the run again (a poison step is not retried forever)
    run = Run.objects.get(pk=outcome.run.pk)
    assert (run.status, run.error_code) == (Run.Status.FAILED, "SYSTEM_ERROR")
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.CANCELLED
    assert again is None and bodies == [ORDER]
    assert outcome.run.pk not in runs_needing_push()


@pytest.mark.django_db(transaction=True)
def test_a_commit_hook_that_raises_after_the_step_committed_is_not_taken_for_a_failed_commit(requester,
                                                                                             monkeypatch):
    from django.db import transaction

    from approvals.models import ConfirmationRequest
    from tools.catalog import services as catalog
    from tools.catalog.models import Cancellation

    # given: a confirmed call whose tool registers a commit hook that raises
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with resume_not_enqueued():
        requester_actions.confirmation_confirm(token=pending.token, user=requester)
    real_cancel = catalog.order_cancel

    def with_a_failing_hook(**kwargs):
        transaction.on_commit(lambda: 1 / 0)
        return real_cancel(**kwargs)

    monkeypatch.setattr(catalog, "order_cancel", with_a_failing_hook)

    # when: the run resumes; its consumption step commits, then the tool's hook raises
    with pytest.raises(ZeroDivisionError):
        claims.run_resume(run_id=outcome.run.pk)

    # then: the step's commit stands and the loop, still holding the run, ends it at once with
    # the error's code (before, it took its own commit for a rollback, lost the run's lease and
    # left it RUNNING for recovery)
    run = Run.objects.get(pk=outcome.run.pk)
    assert (run.status, run.error_code) == (Run.Status.FAILED, "SYSTEM_ERROR")
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.CONSUMED
    assert Cancellation.objects.filter(order__order_id=ORDER).count() == 1


def test_a_recovery_claim_that_another_recoverer_took_before_its_read_back_holds_nothing(requester, monkeypatch):
    from django.db.models.query import QuerySet

    # given: a RUNNING run whose holder's lease expired (its worker is stopped or dead)
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    moment = [clock.now()]
    monkeypatch.setattr(clock, "now", lambda: moment[0])
    Run.objects.filter(pk=outcome.run.pk).update(status=Run.Status.RUNNING,
                                                 lease_expires_at=moment[0] - datetime.timedelta(seconds=1))

    # ... and a recoverer that is paused past its new lease between its claim (UPDATE) and its read
    # of the run, while a second recoverer claims the run
    real_update, second = QuerySet.update, []

    def update(queryset, **values):
        changed = real_update(queryset, **values)
        if queryset.model is Run and not second:
            second.append(None)
            moment[0] += datetime.timedelta(seconds=settings.AGENT_RUN_LEASE_SECONDS + 1)
            second[0] = claims.claim_running(outcome.run.pk, lease_expires_at__lt=clock.now())
        return changed

    monkeypatch.setattr(QuerySet, "update", update)
    first = claims.claim_running(outcome.run.pk, lease_expires_at__lt=clock.now())

    # then: only the second holds the run; the first does not come back with the second's lease
    # (both would then pass every fence as the run's holder)
    assert second[0] is not None and second[0].lease_expires_at == Run.objects.get(pk=outcome.run.pk).lease_expires_at
    assert first is None


def test_an_execution_names_the_process_and_the_run_lease_it_ran_under(requester):
    import os
    import socket

    from audit.models import AuditEvent

    # given: a confirmed cancellation
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending

    # when: its run resumes in this process and executes it
    services.chat_send(user=requester, message="yes", conversation_id=outcome.run.conversation_id,
                       confirmation_token=pending.token)

    # then: the EXECUTED row names this process and the lease its run held when the fence passed
    [row] = AuditEvent.objects.filter(run_id=outcome.run.pk, decision="EXECUTED", tool_name="cancel_order")
    assert row.tool_call_id == pending.tool_call_id
    assert row.execution["holder"] == f"{socket.gethostname()}:{os.getpid()}"
    lease = datetime.datetime.fromisoformat(row.execution["lease"])
    assert row.occurred_at < lease <= row.occurred_at + datetime.timedelta(seconds=settings.AGENT_RUN_LEASE_SECONDS)
    # a row written before any execution (the request for confirmation) names none
    assert AuditEvent.objects.get(run_id=outcome.run.pk, decision="CONFIRMATION_REQUIRED").execution is None
