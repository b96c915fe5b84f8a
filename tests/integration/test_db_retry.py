"""Serialization failures and deadlocks around a consume are retried a bounded number of times and
the side effect still happens once: injected failures on any database, and a
real deadlock on PostgreSQL."""
from __future__ import annotations

import logging
import threading

import psycopg.errors
import pytest
from django.db import OperationalError, connection, transaction

from core.sql.transactions import retry_on_serialization_failure
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import consumption
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.integration.conftest import wait_for
from tools.catalog.models import Cancellation, Order

ORDER = "A202607290001"


def database_error(cause: type[psycopg.errors.Error]) -> OperationalError:
    """An OperationalError as Django raises it for `cause` (psycopg's error is its __cause__)."""
    try:
        try:
            raise cause("injected")
        except psycopg.errors.Error as error:
            raise OperationalError(str(error)) from error
    except OperationalError as wrapped:
        return wrapped


@pytest.fixture
def flaky_consume(monkeypatch):
    """Make approvals.consumption.confirmation_consume fail `failures` times with `cause`, then work.
    Returns the list of attempts (one entry per call)."""
    real = consumption.confirmation_consume
    attempts: list[int] = []
    plan = {"failures": 0, "cause": psycopg.errors.SerializationFailure}

    def consume(**kwargs):
        attempts.append(1)
        if len(attempts) <= plan["failures"]:
            raise database_error(plan["cause"])
        return real(**kwargs)

    def install(failures: int, cause=psycopg.errors.SerializationFailure) -> list[int]:
        plan.update(failures=failures, cause=cause)
        monkeypatch.setattr(consumption, "confirmation_consume", consume)
        return attempts

    return install


def waiting_cancellation(requester):
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was a mistake")
    [pending] = outcome.pending
    return outcome.run, pending


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cause", [psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected])
def test_injected_failures_in_the_consume_are_retried_and_the_side_effect_happens_once(
        requester, flaky_consume, caplog, cause):
    run, pending = waiting_cancellation(requester)
    attempts = flaky_consume(2, cause)

    with caplog.at_level(logging.WARNING, logger="core.sql.transactions"):
        services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                           confirmation_token=pending.token)

    assert len(attempts) == 3
    assert len([r for r in caplog.records if r.name == "core.sql.transactions"]) == 2
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.CONSUMED
    # the rolled-back attempts left no audit rows behind: one execution, audited once
    assert AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order", decision="EXECUTED").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_consume_that_keeps_failing_gives_up_after_three_attempts_and_executes_nothing(requester, flaky_consume):
    run, pending = waiting_cancellation(requester)
    attempts = flaky_consume(99)

    # The decision committed: it is answered as committed (docs/decisions.md, items 15-16); the
    # failed resume ends the run, which the answer shows.
    answer = services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                                confirmation_token=pending.token)
    assert (answer.run.status, answer.run.error_code) == (Run.Status.FAILED, "SYSTEM_ERROR")

    assert len(attempts) == 3
    assert Cancellation.objects.count() == 0
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    # the error reached the caller and ended the run; no request is left CONFIRMED on a finished run:
    # the consume never got through, so nothing ran and the request is REFUSED with the code (not
    # "ended while it waited"; docs/decisions.md)
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.outcome_code) == (ConfirmationRequest.Status.REFUSED, "SYSTEM_ERROR")
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.error_code) == (Run.Status.FAILED, "SYSTEM_ERROR")
    assert AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order", decision="FAILED").count() == 1


def test_other_operational_errors_are_not_retried():
    calls: list[int] = []

    def lost_connection():
        calls.append(1)
        raise OperationalError("server closed the connection unexpectedly")

    with pytest.raises(OperationalError):
        retry_on_serialization_failure(lost_connection)
    assert calls == [1]


@pytest.mark.django_db
def test_inside_an_enclosing_transaction_nothing_is_retried():
    calls: list[int] = []

    def aborted():
        calls.append(1)
        raise database_error(psycopg.errors.SerializationFailure)

    with transaction.atomic(), pytest.raises(OperationalError):
        retry_on_serialization_failure(aborted)
    assert calls == [1]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_real_deadlock_during_the_execution_is_retried_and_cancels_once(requester, caplog):
    """A real deadlock: the pipeline holds the confirmation row (consumed) and waits for the
    order row, which another transaction holds while it waits for the confirmation row.
    PostgreSQL aborts the pipeline's transaction (it waited first, so its deadlock check fires
    first); the retry runs the whole consume + cancellation again, once."""
    run, pending = waiting_cancellation(requester)
    order = Order.objects.get(tenant=requester.tenant, order_id=ORDER)
    pipeline_pid: list[int] = []
    order_locked = threading.Event()
    outcome: dict[str, object] = {}

    def other_transaction() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                # This side must not be the one PostgreSQL picks: check for deadlocks much later.
                cursor.execute("SET LOCAL deadlock_timeout = '20s'")
                list(Order.objects.select_for_update().filter(pk=order.pk))
                order_locked.set()
                wait_for(lambda: pipeline_pid and _waits_for_a_lock(cursor, pipeline_pid[0]),
                         message="the pipeline to wait for the order row")
                # Now take the confirmation row the pipeline consumed: a lock cycle.
                ConfirmationRequest.objects.filter(pk=pending.confirmation_id).update(risk="HIGH")
            outcome["other"] = "committed"
        except BaseException as error:  # noqa: BLE001 - reported to the test
            outcome["other"] = error
        finally:
            connection.close()

    def pipeline() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pipeline_pid.append(cursor.fetchone()[0])
            order_locked.wait(timeout=30)
            outcome["pipeline"] = services.chat_send(user=requester, message="yes",
                                                     conversation_id=run.conversation_id,
                                                     confirmation_token=pending.token)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            outcome["pipeline"] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=other_transaction), threading.Thread(target=pipeline)]
    with caplog.at_level(logging.WARNING, logger="core.sql.transactions"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    assert outcome["other"] == "committed"
    assert not isinstance(outcome["pipeline"], BaseException), outcome["pipeline"]
    assert any("deadlock detected" in r.getMessage() for r in caplog.records if r.name == "core.sql.transactions")
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.CONSUMED
    assert AuditEvent.objects.filter(run_id=run.pk, tool_name="cancel_order", decision="EXECUTED").count() == 1


def _waits_for_a_lock(cursor, pid: int) -> bool:
    cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
    return cursor.fetchone()[0] > 0
