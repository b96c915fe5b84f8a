"""On PostgreSQL with real concurrent senders: a notice goes out once however many workers, retries
or signals race to send it; without a broker the notification threads stay bounded and give their
database connections back."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core import mail
from django.db import connection, connections

from approvals import requester_actions
from notifications import dispatch, services
from notifications.models import Notice

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SENDERS = 8


def _race(fn) -> list:
    """Call `fn` from SENDERS threads released at the same moment, each on its own connection."""
    barrier = threading.Barrier(SENDERS)

    def one(_):
        try:
            barrier.wait(10)
            return fn()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(SENDERS) as pool:
        return list(pool.map(one, range(SENDERS)))


@pytest.fixture
def quiet_refund(settings, make_refund):
    """A PENDING approver-gated refund created with email off: nobody was told yet."""
    settings.NOTIFY_EMAIL = False
    request = make_refund()
    settings.NOTIFY_EMAIL = True
    assert mail.outbox == [] and not Notice.objects.exists()
    return request


def test_concurrent_senders_email_each_approver_once(quiet_refund, monkeypatch):
    from notifications import approver_mail

    written = approver_mail.asked_email

    def slow(*args, **kwargs):  # widen the window between the claim and the send
        time.sleep(0.05)
        return written(*args, **kwargs)

    monkeypatch.setattr(approver_mail, "asked_email", slow)

    results = _race(lambda: services.notify_approvers(request_id=quiet_refund.pk)["emails"])

    assert sum(results) == 2, results
    assert sorted(a for m in mail.outbox for a in m.to) == ["acme-approver1@example.com", "acme-approver2@example.com"]
    notices = Notice.objects.filter(request=quiet_refund, kind=Notice.Kind.REQUESTED)
    assert notices.count() == 2 and not notices.filter(sent_at__isnull=True).exists()


def test_concurrent_retractions_are_sent_once(quiet_refund, requester):
    services.notify_approvers(request_id=quiet_refund.pk)
    requester_actions.confirmation_withdraw(request_id=quiet_refund.pk, requester=requester)  # tells them once
    mail.outbox.clear()
    Notice.objects.filter(kind=Notice.Kind.RETRACTED).delete()  # as if the first sender had not run yet

    results = _race(lambda: services.notify_retraction(request_id=quiet_refund.pk, ending="WITHDRAWN")["emails"])

    assert sum(results) == 2, results
    assert sorted(a for m in mail.outbox for a in m.to) == ["acme-approver1@example.com", "acme-approver2@example.com"]


def _backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


class _Probe:
    """A task that uses the database on the notification thread and records how many backends
    were connected to the test database while it ran."""

    name = "probe"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def apply(self, args, throw=False):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(0.05)")
        self.seen.append(_backends())


def test_eager_notifications_hold_a_bounded_number_of_connections(settings, monkeypatch, db):
    settings.NOTIFY_THREADS = 2
    monkeypatch.setattr(dispatch, "EAGER_IN_THREAD", True)
    before = _backends()
    probe = _Probe()

    for _ in range(12):
        dispatch.dispatch(probe)
    dispatch.join_notifications(30)

    assert len(probe.seen) == 12
    assert dispatch.notification_threads() <= 2
    assert max(probe.seen) <= before + 2  # never one connection per notification
    deadline = time.monotonic() + 5
    while _backends() > before and time.monotonic() < deadline:  # each job gave its connection back
        time.sleep(0.05)
    assert _backends() == before
