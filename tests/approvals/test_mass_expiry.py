"""Expiring 1,000 approver-gated requests at once, on PostgreSQL.

The bound (docs/operations.md, "Mass expiry"): the sweeping thread holds its one connection, the
notifications hold at most NOTIFY_THREADS more per process without a broker or while the broker
is unreachable, and a Celery worker holds one per pool process. Sampled from pg_stat_activity on a
connection of the test's own (not counted) while the sweep and every notification run. No notice
is lost: each expired request's requester is told once (DECIDED) and each approver who was asked
about it is told once that it no longer needs them (RETRACTED), as before; asserted on the ledger
(notifications.models.Notice) and on the emails. Two sweeps racing expire each request once.
"""
from __future__ import annotations

import datetime
import threading
import time
from collections import Counter
from decimal import Decimal

import psycopg
import pytest
from django.core import mail
from django.db import connection, connections

from agentplatform.runtime import resume, services
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.settle import sweep_once
from approvals import tasks
from approvals.expiry import confirmations_expire
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from core import clock
from notifications import dispatch
from notifications.models import Notice
from tools.catalog.models import Order
from tools.models import Tool
from tests.integration.conftest import broker, start_worker, wait_for  # noqa: F401 - fixtures of the worker test

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

COUNT = 1000
DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1: every connection is refused


class Sampler(threading.Thread):
    """The peak number of backends connected to the test database, polled every few milliseconds
    on a psycopg connection of its own, which is not counted."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="connection-sampler")
        db = connection.settings_dict
        self._conn = psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                                     password=db["PASSWORD"] or None, dbname=db["NAME"], autocommit=True)
        self._done = threading.Event()
        self.peak = 0

    def count(self) -> int:
        with self._conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            return cursor.fetchone()[0]

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.count())
            time.sleep(0.002)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self.join(5)
        self._conn.close()


def _due(requester, approvers, count: int, *, runs: int = 0) -> list:
    """`count` PENDING approver-gated refund requests of `requester` past their deadline, the
    first `runs` of them waiting in real runs (made through the chat service), each with the
    notices that asked `approvers` to decide it. Returns their ids."""
    ids = []
    for n in range(runs):
        order_id = f"A9{n + 1:011d}"
        Order.objects.create(tenant=requester.tenant, order_id=order_id, status=Order.Status.PAID,
                             amount=Decimal("100.00"), customer_name="Mass", customer_phone="13800000000",
                             shipping_address="Road 1")
        outcome = services.chat_send(user=requester, message=f"Refund {order_id} amount 10 because it broke")
        assert outcome.pending and outcome.pending[0].needs == "approvers", outcome
        ids.append(outcome.pending[0].confirmation_id)
    tool = Tool.objects.get(name="refund_order")
    now = clock.now()
    conversation = services.conversation_create(user=requester, title="mass expiry")
    rows = [ConfirmationRequest(
        tenant_id=requester.tenant_id, user=requester, conversation_id=conversation.pk,
        tool_call_id=f"mass_{n}", tool_id=tool.pk, tool_name="refund_order",
        arguments={"order_id": f"A8{n:011d}", "amount": "10.00", "reason": "mass"},
        masked_arguments={"order_id": f"A8{n:011d}", "amount": "10.00", "reason": "mass"},
        arguments_hash=f"{n:064d}", summary=f"Refund CNY 10.00 on A8{n:011d}", risk="CRITICAL",
        policy="APPROVERS", quorum=2, status="PENDING", expires_at=now + datetime.timedelta(hours=1))
        for n in range(count - runs)]
    ConfirmationRequest.objects.bulk_create(rows, batch_size=2000)
    ids += [row.pk for row in rows]
    Notice.objects.bulk_create([
        Notice(tenant_id=requester.tenant_id, request_id=pk, recipient_id=user.pk, kind=Notice.Kind.REQUESTED,
               revision=0, sent_at=now) for pk in ids for user in approvers], batch_size=5000, ignore_conflicts=True)
    ConfirmationRequest.objects.filter(pk__in=ids).update(expires_at=now - datetime.timedelta(seconds=1))
    mail.outbox.clear()
    return ids


def _assert_everyone_told_once(ids, requester, approvers) -> None:
    """Every request EXPIRED and audited once; its requester told once (DECIDED) and each approver
    asked about it told once that it no longer needs them (RETRACTED); no notice failed."""
    assert ConfirmationRequest.objects.filter(pk__in=ids, status="EXPIRED").count() == len(ids)
    audited = Counter(AuditEvent.objects.filter(confirmation_id__in=ids, decision="EXPIRED")
                      .values_list("confirmation_id", flat=True))
    assert len(audited) == len(ids) and set(audited.values()) == {1}
    notices = Notice.objects.filter(request_id__in=ids)
    decided = notices.filter(kind=Notice.Kind.DECIDED)
    retracted = notices.filter(kind=Notice.Kind.RETRACTED)
    assert decided.filter(recipient=requester, sent_at__isnull=False, error="").count() == len(ids)
    for approver in approvers:
        assert retracted.filter(recipient=approver, sent_at__isnull=False, error="").count() == len(ids)
    assert decided.count() + retracted.count() == 3 * len(ids)  # nobody else, nothing twice


def _assert_emails(ids, requester, approvers) -> None:
    recipients = Counter(address for message in mail.outbox for address in message.to)
    assert recipients == {requester.email: len(ids), **{a.email: len(ids) for a in approvers}}


def _sweep_until_nothing_due() -> int:
    """The web sweeper's ticks back to back (one batch of at most 500 expiries each)."""
    total = 0
    while expired := sweep_once()["expired"]:
        total += expired
    return total


@pytest.fixture
def approvers(approver1, approver2):
    return [approver1, approver2]


@pytest.fixture
def notification_threads(settings, monkeypatch):
    """Notifications on the process's notification threads, as in production without a broker."""
    settings.NOTIFY_THREADS = 2
    monkeypatch.setattr(dispatch, "EAGER_IN_THREAD", True)
    yield settings.NOTIFY_THREADS
    dispatch.join_notifications(60)


def test_without_a_broker_1000_expiries_hold_the_sweeper_and_notify_threads_connections(
        requester, approvers, notification_threads):
    # given: 1,000 due requests, five of them waiting in runs
    ids = _due(requester, approvers, COUNT, runs=5)
    dispatch.join_notifications(60)  # the runs' approvers were asked
    mail.outbox.clear()
    connections.close_all()

    # when: the sweeper expires them and every notification runs
    with Sampler() as sampler:
        assert _sweep_until_nothing_due() == COUNT
        dispatch.join_notifications(300)

    # then: the sweeping thread's connection plus at most NOTIFY_THREADS, never one per notification
    assert 0 < sampler.peak <= 1 + notification_threads, sampler.peak
    _assert_everyone_told_once(ids, requester, approvers)
    _assert_emails(ids, requester, approvers)
    # the runs waiting on five of them were resumed and told the model the call expired
    runs = ConfirmationRequest.objects.filter(pk__in=ids[:5]).values_list("run_id", flat=True)
    told = RunEvent.objects.filter(run_id__in=runs, type=RunEvent.Type.TOOL_EXECUTION_COMPLETED,
                                   payload__code="CONFIRMATION_EXPIRED")
    assert sorted(told.values_list("run_id", flat=True)) == sorted(runs)


@pytest.fixture
def broker_down(settings, monkeypatch):
    """broker_down() -> the list of publishes attempted from then on: a broker is configured
    (tasks are not eager) but refuses every connection."""
    from celery.app.task import Task

    from agentplatform.celery import app

    tries: list[str] = []

    def down() -> list[str]:
        settings.CELERY_TASK_ALWAYS_EAGER = False
        # Celery reads CELERY_BROKER_URL from the environment before its settings
        monkeypatch.setenv("CELERY_BROKER_URL", DEAD_BROKER)
        monkeypatch.setattr(app.conf, "broker_url", DEAD_BROKER)
        monkeypatch.setattr(app, "_pool", None)  # no producer connection kept from an earlier test
        monkeypatch.setattr(app.amqp, "_producer_pool", None)
        assert app.connection_for_write().port == 1
        publish = Task.apply_async

        def counted(self, *args, **kwargs):
            tries.append(self.name)
            return publish(self, *args, **kwargs)

        monkeypatch.setattr(Task, "apply_async", counted)
        return tries

    yield down
    monkeypatch.undo()
    app._pool = None
    app.amqp._producer_pool = None


def test_with_the_broker_down_1000_expiries_lose_no_notice_and_try_the_broker_once(
        requester, approvers, notification_threads, broker_down, settings):
    ids = _due(requester, approvers, COUNT, runs=2)
    dispatch.join_notifications(60)  # the runs' approvers were asked
    mail.outbox.clear()
    tries = broker_down()
    connections.close_all()

    with Sampler() as sampler:
        assert _sweep_until_nothing_due() == COUNT
        dispatch.join_notifications(300)

    assert 0 < sampler.peak <= 1 + notification_threads, sampler.peak
    _assert_everyone_told_once(ids, requester, approvers)
    _assert_emails(ids, requester, approvers)
    # one refused publish; then the broker counts as down for BROKER_RETRY_SECONDS and the rest
    # run in this process at once (before, each of the 2,000 waited out the publish retries)
    assert len(tries) == 1, tries[:5]
    # the runs were not resumed (their resume could not be sent): the recovery sweep takes them
    # once the broker is back, and the model is told the calls expired
    run_ids = list(ConfirmationRequest.objects.filter(pk__in=ids[:2]).values_list("run_id", flat=True))
    assert set(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True)) == {
        Run.Status.AWAITING_CONFIRMATION}
    settings.CELERY_TASK_ALWAYS_EAGER = True
    resume.push(run_ids)
    told = RunEvent.objects.filter(run_id__in=run_ids, type=RunEvent.Type.TOOL_EXECUTION_COMPLETED,
                                   payload__code="CONFIRMATION_EXPIRED")
    assert sorted(told.values_list("run_id", flat=True)) == sorted(run_ids)


@pytest.mark.services
def test_with_a_worker_1000_expiries_hold_one_connection_per_pool_process(
        requester, approvers, start_worker):  # noqa: F811 - the fixture imported above
    worker = start_worker(concurrency=2, env={"EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend"})
    ids = _due(requester, approvers, COUNT)
    notices = Notice.objects.filter(request_id__in=ids, kind__in=[Notice.Kind.DECIDED, Notice.Kind.RETRACTED],
                                    sent_at__isnull=False)
    connections.close_all()

    with Sampler() as sampler:
        assert tasks.expire_confirmations() == COUNT  # the beat task, publishing to the broker
        connections.close_all()
        wait_for(lambda: notices.count() == 3 * COUNT, timeout=600, message="every notice sent by the worker",
                 details=worker.tail)

    # the sweeping process's connection, one per pool process (2), and the worker's main process
    assert 0 < sampler.peak <= 1 + 2 + 1, sampler.peak
    _assert_everyone_told_once(ids, requester, approvers)


def test_two_racing_sweeps_expire_each_request_once(requester, approvers):
    ids = _due(requester, approvers, COUNT)
    barrier = threading.Barrier(2)
    results: list[list] = [[], []]

    def sweep(slot: int) -> None:
        try:
            barrier.wait(10)
            while expired := confirmations_expire(limit=tasks.BATCH):
                results[slot] += expired
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)

    assert len(results[0]) + len(results[1]) == COUNT
    assert set(results[0]) | set(results[1]) == set(ids)
    _assert_everyone_told_once(ids, requester, approvers)
    _assert_emails(ids, requester, approvers)


def test_the_sampler_counts_every_connection_of_this_database(db):
    """The bounds above are only as good as the count: one more connection shows in it."""
    connections.close_all()
    with Sampler() as sampler:
        before = sampler.count()
        connection.ensure_connection()
        assert sampler.count() == before + 1
