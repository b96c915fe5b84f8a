"""What the audit hash chain costs per audited call.

Three ways of writing the same audit row, interleaved per iteration, each committed on its own
(autocommit, as a denial is written), on one PostgreSQL database:

- unchained: `core.sql.statements.insert_row(AuditEvent, ...)`, the hot path before the chain (one
  INSERT). Its rows go to a tenant of their own, `bench-unchained`, whose chain therefore does
  not verify (`audit_verify` reports it; the bench database is not a trail to keep);
- chained: `audit.events.tool_call_decided(...)`, the hot path now (one statement: head upsert + INSERT);
- chained inside a transaction that also writes one other row (the shape of a governed call: the
  audit row joins the business transaction, so the head lock is held until its COMMIT).

Then N threads write chained rows of one tenant at once (the head row serialises them) and the
rate is printed, with the chain verified afterwards.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/audit_chain.py
       [--iterations 2000] [--warmup 200] [--threads 8] [--seconds 5]
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    _common.setup()

    from django.db import close_old_connections, connection, connections, transaction
    from django.utils import timezone

    import _data
    from core.sql.statements import insert_row
    from agentplatform.tenancy.models import Tenant
    from audit import events
    from audit.chain import CHAIN_FIELDS
    from audit.verify_reference import verify_tenant
    from audit.models import AuditEvent

    user = _data.personas()["requester"]
    unchained, _ = Tenant.objects.get_or_create(slug="bench-unchained", defaults={"name": "bench: unchained rows"})
    row = dict(decision="EXECUTED", tool_name="list_orders", status="OK", policy_decision="ALLOW",
               request_id="bench-req", tool_call_id="call_bench", arguments_hash="0" * 64,
               masked_arguments={"order_id": "A2026****0001", "reason": "bench"}, duration_ms=1.25,
               message="bench: audit chain")

    def unchained_write():
        event = AuditEvent(tenant_id=unchained.pk, actor_id=None, **row)
        event.occurred_at = timezone.now()
        insert_row(AuditEvent, {f.attname: getattr(event, f.attname) for f in AuditEvent._meta.concrete_fields
                                if f.attname not in CHAIN_FIELDS})

    def chained_write():
        events.tool_call_decided(tenant_id=user.tenant_id, actor_id=user.pk, **row)

    def chained_in_transaction():
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM tenancy_tenant WHERE id = %s FOR UPDATE", [user.tenant_id])
            events.tool_call_decided(tenant_id=user.tenant_id, actor_id=user.pk, **row)

    scenarios = {"unchained INSERT (before)": unchained_write, "chained record() (now)": chained_write,
                 "chained, in a 2-statement transaction": chained_in_transaction}
    _common.header("Audit hash chain: cost per audited call", notes=[
        f"{args.iterations} iterations after {args.warmup} warm-up, the three writes interleaved",
        "each write commits on its own (autocommit); the transaction case adds one SELECT ... FOR UPDATE",
    ])
    samples = {label: [] for label in scenarios}
    for i in range(args.warmup + args.iterations):
        for label, write in scenarios.items():
            started = time.perf_counter()
            write()
            if i >= args.warmup:
                samples[label].append(_common.elapsed_ms(started))
    for label, values in samples.items():
        print(_common.row(label, values))
    before = _common.summary(samples["unchained INSERT (before)"])["median"]
    now = _common.summary(samples["chained record() (now)"])["median"]
    print(f"\n  added by the chain at the median: {now - before:.3f} ms per audited call "
          f"(x{now / before:.2f} the unchained INSERT)")

    # Contention: N threads, one tenant.
    stop = time.monotonic() + args.seconds
    counts = [0] * args.threads
    barrier = threading.Barrier(args.threads)

    def worker(index: int) -> None:
        close_old_connections()
        try:
            barrier.wait()
            while time.monotonic() < stop:
                chained_write()
                counts[index] += 1
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    print(f"  {args.threads} threads writing chained rows of one tenant: {sum(counts) / elapsed:.1f} rows/s "
          f"({sum(counts)} rows in {elapsed:.1f} s)")
    checked = time.perf_counter()
    report = verify_tenant(user.tenant)
    print(f"  audit_verify of tenant {report.tenant_slug}: {'OK' if report.ok else 'BROKEN ' + report.problem}, "
          f"{report.rows} rows in {_common.elapsed_ms(checked) / 1000:.1f} s")
    print(f"end load: {_common.load_average()}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
