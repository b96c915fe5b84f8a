"""Audit verification at two sizes of one tenant's chain: full rows/s, and the incremental run.

Builds one tenant's validly chained audit rows (tenant `bench-verify`, its own: its rows are
removed and rebuilt at every run): the links are computed in Python by `audit.chain` (the writer's
own `body_digest` and `link_hash`) and the rows are COPYed in batches, which is how a million rows
take a minute instead of an hour through `insert_chained`. Then, at each size:

- the reference, `audit.verify_reference.verify_tenant` (the ORM path of `manage.py audit_verify` before the
  fast verifier), unless --no-reference;
- the fast full verification (`audit.verify.verify_chain` from the first row) in rows/s;
- the same run split among `--workers` processes (`audit.verify_parallel.verify_chain_split`, 2 by
  default; 1 skips it), whose verdict must equal the single run's;
- a checkpoint sealed where that full run ended (as `audit_verify --full` does);
- 1,000 new rows written through the real writer (`audit.events.tool_call_decided`), then the
  incremental run (`audit.verify_checkpoint.chain_verify`), whose time should not depend on the size.

    createdb -h 127.0.0.1 -U postgres ap_bench_verify
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench_verify python bench/audit_verify.py
    DATABASE_URL=... python bench/audit_verify.py --small 100000 --large 1000000 --new 1000
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

SLUG = "bench-verify"


def _clear(tenant) -> None:
    """Remove the bench tenant's rows, head and checkpoint (the owner's way around the triggers)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("DELETE FROM audit_auditevent WHERE tenant_id = %s", [tenant.pk])
        cursor.execute("DELETE FROM audit_auditchainhead WHERE tenant_id = %s", [tenant.pk])
        cursor.execute("DELETE FROM audit_auditverifycheckpoint WHERE tenant_id = %s", [tenant.pk])


def _row(i: int, *, tenant_id: int, actor_id: int | None, at: datetime.datetime) -> dict:
    order = f"A9{i:011d}"
    return {
        "id": uuid.uuid4(), "occurred_at": at, "tenant_id": tenant_id, "actor_id": actor_id,
        "request_id": f"bench-{i}", "conversation_id": uuid.UUID(int=i % 5000 + 1), "run_id": uuid.uuid4(),
        "tool_call_id": f"call_{i}", "tool_name": ("cancel_order", "refund_order", "list_orders")[i % 3],
        "tool_owner": "orders-team", "tool_version": "3", "decision": "EXECUTED", "policy_decision": "ALLOW",
        "status": "OK", "arguments_hash": hashlib.sha256(order.encode()).hexdigest(),
        "masked_arguments": {"order_id": order, "amount": 100.5 + i % 7, "reason": "bench — ünïcode", "n": [i, 1e16]},
        "confirmation_id": None, "idempotency_key": f"key-{i}", "business_result_id": "",
        "duration_ms": 1.25 + i % 10, "message": f"bench row {i}",
        "execution": {"holder": "bench:1", "lease": None}, "policy_version": 3, "policy_rules": ["r-1", "limit-2"],
        "channel": None, "business_object": order,
    }


def _build(tenant, actor_id: int | None, count: int) -> float:
    """Append `count` validly chained rows after the tenant's head; returns the seconds taken."""
    from django.db import connection, transaction
    from psycopg.types.json import Jsonb

    from audit.chain import CHAIN_FIELDS, body_digest, link_hash
    from audit.models import AuditChainHead, AuditEvent

    started = time.perf_counter()
    head = AuditChainHead.objects.filter(tenant=tenant).values("seq", "hash").first() or {"seq": 0, "hash": ""}
    seq, prev = head["seq"], head["hash"]
    fields = [f for f in AuditEvent._meta.concrete_fields if f.attname not in CHAIN_FIELDS]
    columns = [f.column for f in fields] + list(CHAIN_FIELDS)
    json_fields = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
    base = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    connection.ensure_connection()
    with transaction.atomic():
        with connection.connection.cursor() as cursor:
            with cursor.copy(f"COPY audit_auditevent ({', '.join(columns)}) FROM STDIN") as copy:
                for _ in range(count):
                    seq += 1
                    values = _row(seq, tenant_id=tenant.pk, actor_id=actor_id,
                                  at=base + datetime.timedelta(seconds=seq, microseconds=seq % 997))
                    link = link_hash(prev, seq, body_digest(values))
                    copy.write_row([Jsonb(values[f.attname]) if f.attname in json_fields and values[f.attname] is not None
                                    else values[f.attname] for f in fields] + [seq, prev, link])
                    prev = link
        AuditChainHead.objects.update_or_create(tenant=tenant, defaults={"seq": seq, "prev_hash": "", "hash": prev})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")
    return time.perf_counter() - started


def _timed(call):
    """(result, wall seconds), and the CPU seconds of this process in `_timed.cpu` (the machine is
    shared: wall time includes waiting for a core; PostgreSQL's own CPU is not in it)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = call()
    _timed.cpu = time.process_time() - cpu
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000, help="rows at the small size")
    parser.add_argument("--large", type=int, default=1_000_000, help="rows at the large size")
    parser.add_argument("--new", type=int, default=1_000, help="rows written before each incremental run")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference verifier (slow)")
    parser.add_argument("--workers", type=int, default=2,
                        help="processes of the split full run (audit.verify_parallel); 1 skips it")
    args = parser.parse_args()
    _common.setup()

    import _data
    from agentplatform.tenancy.models import Tenant
    from audit import events
    from audit.verify_reference import verify_tenant
    from audit.verify import verify_chain
    from audit.verify_checkpoint import chain_verify, checkpoint_advance
    from audit.verify_parallel import verify_chain_split

    actor = _data.personas()["requester"]
    tenant, _ = Tenant.objects.get_or_create(slug=SLUG, defaults={"name": "bench: audit verification"})
    _clear(tenant)
    _common.header("Audit verification: full rows/s and the incremental run at two sizes of one tenant's chain", notes=[
        f"tenant {SLUG}: {args.small:,} then {args.large:,} chained rows (COPYed, links computed by audit.chain); "
        f"{args.new:,} rows through the real writer before each incremental run",
    ])
    results = {}
    for size in (args.small, args.large):
        have = _count(tenant)
        built = _build(tenant, actor.pk, size - have)
        print(f"built {size - have:,} rows in {built:.1f} s")
        figures = {}
        if not args.no_reference:
            report, seconds = _timed(lambda: verify_tenant(tenant))
            assert report.ok, report.problem
            figures["reference"] = seconds
            print(f"  reference verify_tenant: {report.rows:,} rows in {seconds:.2f} s = {report.rows / seconds:,.0f} rows/s "
                  f"(Python CPU {_timed.cpu:.2f} s = {report.rows / _timed.cpu:,.0f} rows/s)")
        verdict, seconds = _timed(lambda: verify_chain(tenant))
        assert verdict.ok and verdict.rows == size, verdict
        figures["fast"] = seconds
        print(f"  fast verify_chain      : {verdict.rows:,} rows in {seconds:.2f} s = {verdict.rows / seconds:,.0f} rows/s "
              f"(Python CPU {_timed.cpu:.2f} s = {verdict.rows / _timed.cpu:,.0f} rows/s)")
        if args.workers > 1:
            split, seconds = _timed(lambda: verify_chain_split(tenant, workers=args.workers))
            assert split == verdict, (split, verdict)
            figures["split"] = seconds
            print(f"  split, {args.workers} processes    : {split.rows:,} rows in {seconds:.2f} s = "
                  f"{split.rows / seconds:,.0f} rows/s (the same verdict; processes started included)")
        # seal the checkpoint where this full run ended (what `audit_verify --full` does after it)
        checkpoint_advance(tenant_id=tenant.pk, seq=verdict.last_seq, row_hash=verdict.last_hash)
        for i in range(args.new):
            events.tool_call_decided(tenant_id=tenant.pk, actor_id=actor.pk, decision="EXECUTED", tool_name="cancel_order",
                                     status="OK", masked_arguments={"order_id": f"A9{i:011d}", "amount": 1.5},
                                     duration_ms=2.0, message=f"bench new row {i}")
        verdict, seconds = _timed(lambda: chain_verify(tenant=tenant))
        assert verdict.ok and verdict.rows == args.new, verdict
        figures["incremental"] = seconds
        print(f"  incremental            : {verdict.rows:,} new rows in {seconds * 1000:.1f} ms (from checkpoint "
              f"{verdict.start_seq:,})")
        results[size] = figures
    small, large = results[args.small], results[args.large]
    print(f"\n  {'':24} {args.small:>12,} {args.large:>12,}  growth (rows x{args.large / args.small:.0f})")
    for key, label in (("reference", "reference full (s)"), ("fast", "fast full (s)"), ("split", "split full (s)"),
                       ("incremental", "incremental (ms)")):
        if key in small:
            scale = 1000 if key == "incremental" else 1
            print(f"  {label:24} {small[key] * scale:12.2f} {large[key] * scale:12.2f}  {large[key] / small[key]:.2f}x")
    _clear(tenant)
    print(f"\nload average at the end: {_common.load_average()}")
    return 0


def _count(tenant) -> int:
    from audit.models import AuditChainHead

    head = AuditChainHead.objects.filter(tenant=tenant).values_list("seq", flat=True).first()
    return head or 0


if __name__ == "__main__":
    raise SystemExit(main())
