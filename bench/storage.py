"""Storage: bytes on disk per governed call and per approve-and-resume cycle, by class of record,
the size of a tenant after a year under the retention defaults, and what one retention run costs.

Measured as the growth of `pg_total_relation_size` (table, indexes and TOAST) of every table of
the public schema over N operations, after a warm-up that fills the first pages:

1. governed call: `ToolCallingManager().execute_tool_calls` of the built-in `list_orders` (LOW,
   read-only: one audit row, no request), as bench/governance_overhead.py times it;
2. approve-and-resume cycle: a chat asks to cancel an order (a new conversation, a run that stops
   at CONFIRMATION_REQUIRED), the requester confirms with the token, the resume runs in-process
   and executes once (as bench/confirm_latency.py phase 1).

Tables are grouped by retention class (run events, conversations with messages and runs, decided
requests with approvals, claims, views and notifications, audit rows, other: idempotency records,
business rows). The year estimate keeps each class for its default days (RETENTION_*_DAYS) at
`--per-day` cycles a day. With `--retention` the script then applies retention 401 days later to
the bench tenant (archive to a temporary directory, then delete) and prints the time, the rows per
second and the archive bytes per cycle: run it on a database of its own, it empties the tenant's
history.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/storage.py
       [--calls 2000] [--cycles 500] [--warmup 50] [--per-day 10000] [--retention]
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

CLASSES = {
    "run events": ("runtime_runevent",),
    "conversations (messages, runs)": ("runtime_conversation", "runtime_message", "runtime_run"),
    "decided requests (approvals, ...)": ("approvals_confirmationrequest", "approvals_approval",
                                          "approvals_requestview", "approvals_requestclaim"),
    "audit rows (+ chain head)": ("audit_auditevent", "audit_auditchainhead"),
    "idempotency records": ("tools_idempotencyrecord",),
}
OTHER = "business rows and the rest (not pruned)"
DAYS_SETTING = {"run events": "RETENTION_RUN_EVENT_DAYS", "conversations (messages, runs)": "RETENTION_CONVERSATION_DAYS",
                "decided requests (approvals, ...)": "RETENTION_REQUEST_DAYS",
                "audit rows (+ chain head)": "RETENTION_AUDIT_DAYS"}


def sizes() -> dict[str, int]:
    """table name -> pg_total_relation_size in bytes, for every table of the public schema."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                       "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'")
        return dict(cursor.fetchall())


def by_class(before: dict[str, int], after: dict[str, int], count: int) -> dict[str, float]:
    """class -> bytes per operation; tables outside CLASSES go to OTHER."""
    grown = {t: after[t] - before.get(t, 0) for t in after if after[t] != before.get(t, 0)}
    per: dict[str, float] = {name: 0.0 for name in CLASSES}
    per[OTHER] = 0.0
    for table, delta in grown.items():
        name = next((c for c, tables in CLASSES.items() if table in tables), OTHER)
        per[name] += delta / count
    return per


def print_classes(title: str, per: dict[str, float]) -> None:
    print(f"{title}: {sum(per.values()):,.0f} B per operation")
    for name, value in per.items():
        print(f"  {name:<40} {value:10,.0f} B")


def governed_calls(*, user, count: int, warmup: int) -> dict[str, float]:
    from tools.manager import ToolCallingManager

    import _data

    conversation = _data.conversation(user=user, label="storage governed calls")
    ctx = _data.tool_context(user=user, conversation_id=conversation.id)
    manager = ToolCallingManager()
    for i in range(warmup):
        manager.execute_tool_calls(ctx, _data.assistant_message(f"call_w{i}", "list_orders", "{}"))
    before = sizes()
    for i in range(count):
        manager.execute_tool_calls(ctx, _data.assistant_message(f"call_{i}", "list_orders", "{}"))
    return by_class(before, sizes(), count)


def cycles(*, user, count: int, warmup: int, orders: list[str]) -> dict[str, float]:
    from agentplatform.runtime import services
    from agentplatform.runtime.models import Run
    from approvals import requester_actions

    import _data

    def one(order_id: str) -> None:
        conversation = _data.conversation(user=user, label=f"storage cycle {order_id}")
        outcome = services.chat_send(user=user, conversation_id=conversation.id,
                                     message=f"Please cancel order {order_id} because bench: customer changed their mind")
        if not outcome.pending:
            raise RuntimeError(f"expected a gated call, got {outcome.run.status}")
        requester_actions.confirmation_confirm(token=outcome.pending[0].token, user=user)
        if Run.objects.get(pk=outcome.run.pk).status != Run.Status.COMPLETED:
            raise RuntimeError("the resumed run did not complete")

    for _ in range(warmup):
        one(orders.pop())
    before = sizes()
    for _ in range(count):
        one(orders.pop())
    return by_class(before, sizes(), count)


def year(per_cycle: dict[str, float], per_day: int) -> None:
    from django.conf import settings

    print(f"\na tenant after one year at {per_day:,} cycles a day, retention defaults:")
    total = 0.0
    for name, value in per_cycle.items():
        if name == "idempotency records":  # pruned hourly past TOOLS_IDEMPOTENCY_RETENTION_HOURS
            kept = max(72, settings.TOOLS_IDEMPOTENCY_RETENTION_HOURS) / 24
        else:
            days = getattr(settings, DAYS_SETTING[name]) if name in DAYS_SETTING else 365
            kept = 365 if days == 0 else min(days, 365)
        size = value * per_day * kept
        total += size
        print(f"  {name:<40} {value:8,.0f} B x {per_day:,}/day x {kept:5.1f} days = {size / 1e9:7.2f} GB")
    print(f"  {'total':<40} {total / 1e9:7.2f} GB   (without retention: "
          f"{sum(per_cycle.values()) * per_day * 365 / 1e9:.2f} GB)")


def retention(*, user) -> None:
    from agentplatform.retention.services import retention_run
    from audit.models import AuditEvent
    from core import clock

    audit_rows = AuditEvent.objects.filter(tenant=user.tenant).count()
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        report = retention_run(tenant=user.tenant, now=clock.now() + datetime.timedelta(days=401), root=Path(root))
        seconds = time.perf_counter() - started
        files = {kind: sum(p.stat().st_size for p in Path(root).rglob(f"{kind}-*.jsonl")) for kind in ("audit", "requests")}
    rows = sum(report.deleted.values())
    print(f"\nretention 401 days later: {seconds:.2f} s for {report.deleted} ({rows / seconds:,.0f} rows/s; "
          f"{audit_rows:,} audit rows before)")
    for kind, key in (("audit", "audit"), ("requests", "requests")):
        count = report.deleted.get(key) or 0
        print(f"  archive {kind:<9}: {files[kind]:>12,} B for {count:,} records = "
              f"{files[kind] / max(count, 1):,.0f} B per record")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--per-day", type=int, default=10_000)
    parser.add_argument("--retention", action="store_true", help="then apply retention (empties the tenant's history)")
    args = parser.parse_args()
    _common.setup()
    _common.header("storage per governed call and per approve-and-resume cycle",
                   ["pg_total_relation_size growth of every public table (heap, indexes, TOAST) over N operations"])
    import _data

    people = _data.personas()
    user = people["requester"]
    _data.reset(tenant=user.tenant)
    orders = _data.orders_create(tenant=user.tenant, count=args.cycles + args.warmup)
    per_call = governed_calls(user=user, count=args.calls, warmup=args.warmup)
    print_classes(f"governed call (list_orders), n={args.calls}", per_call)
    per_cycle = cycles(user=user, count=args.cycles, warmup=args.warmup, orders=orders)
    print_classes(f"\napprove-and-resume cycle (cancel_order, requester's token), n={args.cycles}", per_cycle)
    year(per_cycle, args.per_day)
    if args.retention:
        retention(user=user)
    print(f"\n{_common.load_average()}")


if __name__ == "__main__":
    main()
