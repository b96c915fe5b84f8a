"""Mass expiry: what expiring many approver-gated requests at once costs, and how many database
connections it opens.

Builds --count PENDING approver-gated refund requests of acme whose deadline has passed, each with
the approvers' "asked to decide" notices recorded (so each expiry tells the requester and retracts
two approvers: three emails) and --runs of them waiting in real runs (each resumes to tell the model
CONFIRMATION_EXPIRED). Then runs the expiry of the web sweeper and of settle-on-read (`confirmations_expire_due`: one
transaction of at most 500 expiries) back to back until nothing is due, and waits for every
notification, sampling this database's connections (pg_stat_activity) every few milliseconds on a
connection of its own (not counted). Prints the time, the peak connections, and the notices and
emails written against those expected.

    createdb -h 127.0.0.1 -U postgres ap_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/mass_expiry.py
    DATABASE_URL=... python bench/mass_expiry.py --count 1000 --mode broker-down

Modes: `eager` (no broker, the embedded default: notifications on the process's notification
threads), `broker-down` (a broker is configured but refuses connections: the fallback).
The rows are bench artefacts (conversation "bench: mass expiry"): `_data.reset` removes them first.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import threading
import time

import _common

BROKER_DOWN_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1: every connection is refused


class Sampler(threading.Thread):
    """Polls the number of backends connected to this database, on its own connection (excluded)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        import psycopg

        self._conn = psycopg.connect(dsn, autocommit=True)
        self._done = threading.Event()
        self.peak = 0
        self.samples = 0

    def count(self) -> int:
        with self._conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            return cursor.fetchone()[0]

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.count())
            self.samples += 1
            time.sleep(0.003)

    def stop(self) -> None:
        self._done.set()
        self.join(5)
        self._conn.close()


def _build(*, personas, count: int, runs: int) -> list:
    """`count` due approver-gated refund requests (the first `runs` of them waiting in real runs),
    each with REQUESTED notices to both approvers. Returns their ids."""
    from django.db import transaction

    from agentplatform.runtime import services
    from agentplatform.runtime.models import Conversation
    from approvals.models import ConfirmationRequest
    from core import clock
    from notifications import dispatch
    from notifications.models import Notice
    from tools.models import Tool

    requester, approvers = personas["requester"], [personas["approver1"], personas["approver2"]]
    import _data

    ids = []
    _data.orders_create(tenant=requester.tenant, count=runs, start=1)
    for n in range(runs):  # real runs, through the chat service, waiting for the approvers
        outcome = services.chat_send(user=requester, message=f"Refund A9{n + 1:011d} amount 10 because it broke")
        assert outcome.pending and outcome.pending[0].needs == "approvers", outcome
        ids.append(outcome.pending[0].confirmation_id)
    Conversation.objects.filter(pk__in=ConfirmationRequest.objects.filter(pk__in=ids).values("conversation_id")).update(
        title="bench: mass expiry")
    conversation = Conversation.objects.create(tenant_id=requester.tenant_id, user=requester, title="bench: mass expiry")
    tool = Tool.objects.get(name="refund_order")
    now = clock.now()
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
    dispatch.join_notifications(timeout=120)  # the real runs' approvers were told already
    with transaction.atomic():
        Notice.objects.bulk_create([
            Notice(tenant_id=requester.tenant_id, request_id=pk, recipient_id=user.pk, kind=Notice.Kind.REQUESTED,
                   revision=0, sent_at=now) for pk in ids for user in approvers], batch_size=5000, ignore_conflicts=True)
        ConfirmationRequest.objects.filter(pk__in=ids).update(expires_at=now - datetime.timedelta(seconds=1))
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="due requests (default 1000)")
    parser.add_argument("--runs", type=int, default=20, help="of them waiting in real runs (default 20)")
    parser.add_argument("--mode", choices=("eager", "broker-down"), default="eager")
    args = parser.parse_args()
    os.environ["EMAIL_BACKEND"] = "django.core.mail.backends.locmem.EmailBackend"
    _common.setup(broker_url=BROKER_DOWN_URL if args.mode == "broker-down" else None)

    from django.conf import settings
    from django.core import mail
    from django.db import connection

    from agentplatform.runtime import resume
    from agentplatform.runtime.models import Run
    from approvals.expiry import confirmations_expire_due
    from approvals.models import ConfirmationRequest
    from notifications import dispatch
    from notifications.models import Notice

    import _data

    mail.outbox = []
    broker_down = args.mode == "broker-down"
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the data is built with every task run in-process
    personas = _data.personas()
    _data.reset(tenant=personas["requester"].tenant)
    _common.header(f"mass expiry: {args.count} due approver-gated requests at once ({args.mode})", notes=[
        f"NOTIFY_THREADS={settings.NOTIFY_THREADS}, CONN_MAX_AGE={connection.settings_dict['CONN_MAX_AGE']}, "
        f"{args.runs} of the requests wait in real runs"])
    ids = _build(personas=personas, count=args.count, runs=args.runs)
    settings.CELERY_TASK_ALWAYS_EAGER = not broker_down
    mail.outbox = []  # the real runs' approvers were emailed while they were built
    connection.close()  # the sweep starts from what a web process holds: its own connection only

    dsn = os.environ["DATABASE_URL"]
    sampler = Sampler(dsn)
    baseline = sampler.count()
    sampler.start()
    started = time.perf_counter()
    swept, batches = 0, 0
    while True:  # the web sweeper's expiry, tick after tick, as many as it takes (one batch each)
        expired_now = confirmations_expire_due()
        swept, batches = swept + expired_now, batches + 1
        if not expired_now:
            break
    swept_ms = _common.elapsed_ms(started)
    dispatch.join_notifications(timeout=600)
    resume.join_background_runs(timeout=60)
    told_ms = _common.elapsed_ms(started)
    sampler.stop()

    expired = ConfirmationRequest.objects.filter(pk__in=ids, status="EXPIRED").count()
    notices = Notice.objects.filter(request_id__in=ids)
    decided = notices.filter(kind=Notice.Kind.DECIDED, sent_at__isnull=False).count()
    retracted = notices.filter(kind=Notice.Kind.RETRACTED, sent_at__isnull=False).count()
    emails = len(mail.outbox)
    run_ids = ConfirmationRequest.objects.filter(pk__in=ids, run_id__isnull=False).values("run_id")
    resumed = Run.objects.filter(pk__in=run_ids).exclude(status="AWAITING_CONFIRMATION").count()
    print(f"  expired           {expired} of {args.count} (the sweeps said {swept}, in {batches - 1} batches)")
    print(f"  sweep             {swept_ms:10.0f} ms  (expire + audit + resume the runs, in the sweeping thread)")
    print(f"  until all told    {told_ms:10.0f} ms  ({told_ms / max(1, args.count):.2f} ms a request)")
    print(f"  connections       peak {sampler.peak} (before the sweep {baseline}; {sampler.samples} samples)")
    print(f"  notices sent      requester DECIDED {decided} of {args.count}, approvers RETRACTED {retracted} "
          f"of {2 * args.count}; emails {emails} of {3 * args.count}")
    print(f"  runs resumed      {resumed} of {args.runs}"
          f"{' (broker down: the recovery sweep resumes them once it is back)' if broker_down else ''}")
    print(f"  {_common.load_average()}")
    _data.reset(tenant=personas["requester"].tenant)
    return 0 if expired == args.count and decided == args.count and retracted == 2 * args.count else 1


if __name__ == "__main__":
    sys.exit(main())
