"""A run's writes are fenced by its lease: once recovery took the run over, the old holder's save
raises RunClaimLost instead of overwriting the new holder's state (agentplatform.runtime.loop._save)."""
from __future__ import annotations

import datetime

import pytest

from agentplatform import clock
from agentplatform.runtime import loop, services
from agentplatform.runtime.models import Run
from approvals import services as approvals
from tests.tools.support import ORDER, resume_not_enqueued
from tools.context import FenceLost


def test_the_old_holder_cannot_save_after_a_takeover(requester):
    # given: a waiting run, confirmed and claimed by this process
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with resume_not_enqueued():
        approvals.confirmation_confirm(token=pending.token, user=requester)
    Run.objects.filter(pk=outcome.run.pk).update(status=Run.Status.RUNNING, lease_expires_at=loop._lease())
    run = Run.objects.get(pk=outcome.run.pk)
    run.state["note"] = "mine"
    loop._save(run, "state")  # the holder saves and renews its lease

    # when: another worker recovers the run (a new lease), then the old holder saves again
    Run.objects.filter(pk=run.pk).update(lease_expires_at=clock.now() + datetime.timedelta(seconds=999))
    run.state["note"] = "stale"

    # then: refused, and the stored state is the one before the takeover
    with pytest.raises(loop.RunClaimLost):
        loop._save(run, "state")
    assert Run.objects.get(pk=run.pk).state["note"] == "mine"


def test_failing_a_run_locks_its_row_before_its_requests_and_a_step_that_rolled_back_keeps_the_lease(requester):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agentplatform.runtime.events import EventRecorder
    from approvals.models import ConfirmationRequest

    # given: a waiting run, claimed by this process, whose request is still open
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    Run.objects.filter(pk=outcome.run.pk).update(status=Run.Status.AWAITING_CONFIRMATION)
    run = Run.objects.get(pk=outcome.run.pk)
    lease = clock.now() + datetime.timedelta(seconds=60)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, lease_expires_at=lease)
    run.status, run.lease_expires_at = Run.Status.RUNNING, lease
    recorder = EventRecorder(run)

    # when: a step that saved the run (a new lease, held until the step ends) rolls back ...
    with pytest.raises(FenceLost), loop._Step(recorder):
        loop._save(run, "state")
        assert run.lease_expires_at != lease
        raise FenceLost("the step is abandoned")
    # ... the run keeps the lease its row has, so the run can still be failed by its holder
    assert run.lease_expires_at == Run.objects.get(pk=run.pk).lease_expires_at

    with CaptureQueriesContext(connection) as captured:
        loop._fail(run, recorder, "SYSTEM_ERROR", "stopped")

    # then: the run's row is locked before any request is (the order run_cancel and a consumption
    # use: no deadlock between them), and the run is FAILED with its request cancelled
    statements = [q["sql"] for q in captured.captured_queries]
    # (the lock read: FOR NO KEY UPDATE on PostgreSQL; SQLite locks the database on write instead)
    run_lock = next(i for i, sql in enumerate(statements) if sql.startswith('SELECT "runtime_run"."id" FROM'))
    first_request = next(i for i, sql in enumerate(statements) if "approvals_confirmationrequest" in sql)
    assert run_lock < first_request
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
    assert not ConfirmationRequest.objects.filter(run_id=run.pk, status=ConfirmationRequest.Status.PENDING).exists()


def test_a_resume_claims_the_run_in_its_first_step_and_a_rolled_back_step_leaves_it_waiting(requester, monkeypatch):
    from agentplatform.runtime.models import RunEvent
    from approvals.models import ConfirmationRequest
    from audit.models import AuditEvent
    from tools.catalog import services as catalog
    from tools.catalog.models import Cancellation

    # given: a waiting run whose call was confirmed (nobody resumed it yet)
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with resume_not_enqueued():
        approvals.confirmation_confirm(token=pending.token, user=requester)
    events_before = RunEvent.objects.filter(run_id=outcome.run.pk).count()

    # when: the resume's first step (claim + consumption) is abandoned: the tool finds the run lost
    real_cancel = catalog.order_cancel

    def lost(**kwargs):
        raise FenceLost("the step is abandoned")

    monkeypatch.setattr(catalog, "order_cancel", lost)
    with pytest.raises(FenceLost):
        loop.run_resume(run_id=outcome.run.pk)

    # then: nothing of the step remains, the claim included: the run waits as before with no
    # lease, its decision is unspent, nothing ran, no event or audit row of the attempt is stored
    run = Run.objects.get(pk=outcome.run.pk)
    assert (run.status, run.lease_expires_at) == (Run.Status.AWAITING_CONFIRMATION, None)
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert request.status == ConfirmationRequest.Status.CONFIRMED and request.consumed_at is None
    assert not Cancellation.objects.filter(order__order_id=ORDER).exists()
    assert RunEvent.objects.filter(run_id=run.pk).count() == events_before
    assert not AuditEvent.objects.filter(run_id=run.pk, decision="EXECUTED").exists()

    # and: the next resume takes it and runs the call once
    monkeypatch.setattr(catalog, "order_cancel", real_cancel)
    resumed = loop.run_resume(run_id=run.pk)
    assert resumed.run.status == Run.Status.COMPLETED
    assert Cancellation.objects.filter(order__order_id=ORDER).count() == 1
    assert AuditEvent.objects.filter(run_id=run.pk, decision="EXECUTED").count() == 1
    assert loop.run_resume(run_id=run.pk) is None  # nothing left to take


def test_a_resume_that_finds_nothing_to_take_leaves_no_transaction_open(requester):
    from django.db import connection

    # given: a run still waiting for its decision
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")

    # when / then: the resume takes nothing and closes the transaction (or, inside the test's
    # own transaction, the savepoint) its claim opened
    depth = len(connection.atomic_blocks)
    assert loop.run_resume(run_id=outcome.run.pk) is None
    assert len(connection.atomic_blocks) == depth
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.AWAITING_CONFIRMATION
