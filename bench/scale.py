"""Scale: what each approval surface costs as one tenant's history grows.

Builds acme's bench history at two sizes (confirmation requests of refund_order gated on two
approvers, almost all decided, a few waiting), and times each surface at both: the approver's
history page and API list, the requester's "my requests" page and API list, the pending tab, the
admin changelists of requests and approvals (as the tenant's administrator), and the
settle-on-read expiry check run before every page and API call. A request that ran carries two
approvals, a rejected one a rejection. Prints median and p95 at each
size and the growth ratio, and EXPLAINs the slowest statement of every surface that grows 1.5x or
more.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/scale.py
    DATABASE_URL=... python bench/scale.py --small 1000 --large 100000 --repeat 15

Sizes are counts of decided requests; the waiting ones are --waiting-small / --waiting-large. The
rows are bench artefacts (conversation "bench: scale"): `_data.reset` removes them before the run.
The audit surfaces are bench/scale_audit.py's.
"""
from __future__ import annotations

import argparse
import datetime
import time
from typing import Any, Callable

import _common

GROWTH_LIMIT = 1.5  # a page may cost at most 1.5x more at 100x the history


def _build(*, requester, approvers, conversation, decided: int, waiting: int, start: int) -> None:
    """Add `decided` decided and `waiting` waiting refund requests of `requester` (ids from `start`),
    with the decisions of `approvers` (two users): both approved the ones that ran, the second
    rejected the ones rejected."""
    from approvals.models import Approval, ConfirmationRequest
    from core import clock
    from tools.models import Tool

    tool = Tool.objects.get(name="refund_order")
    now = clock.now()
    statuses = ["CONSUMED", "CONSUMED", "CANCELLED", "EXPIRED"]  # ran, ran, rejected, nobody decided
    rows = []
    for n in range(start, start + decided + waiting):
        is_waiting = n >= start + decided
        created = now - datetime.timedelta(minutes=(start + decided + waiting - n))
        rows.append(ConfirmationRequest(
            tenant_id=requester.tenant_id, user=requester, conversation_id=conversation.pk,
            tool_call_id=f"scale_{n}", tool_id=tool.pk, tool_name="refund_order",
            arguments={"order_id": f"A9{n:011d}", "amount": "10.00", "reason": "scale"},
            masked_arguments={"order_id": f"A9{n:011d}", "amount": "10.00", "reason": "scale"},
            arguments_hash=f"{n:064d}", summary=f"Refund CNY 10.00 on A9{n:011d}", risk="CRITICAL",
            policy="APPROVERS", quorum=2,
            status="PENDING" if is_waiting else statuses[n % len(statuses)],
            decided_at=None if is_waiting else created + datetime.timedelta(seconds=30),
            expires_at=(now + datetime.timedelta(hours=2)) if is_waiting else created + datetime.timedelta(hours=1)))
    ConfirmationRequest.objects.bulk_create(rows, batch_size=5000)
    decisions = []
    for row in rows:
        if row.status == "CONSUMED":
            decisions += [Approval(request=row, approver=approver, decision="APPROVE") for approver in approvers]
        elif row.status == "CANCELLED":
            decisions.append(Approval(request=row, approver=approvers[1], decision="REJECT", comment="scale"))
    Approval.objects.bulk_create(decisions, batch_size=5000)
    # created_at is auto_now_add: spread it as a real history would be
    ids = [row.pk for row in rows]
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE approvals_confirmationrequest SET created_at = expires_at - interval '1 hour' "
            "WHERE id = ANY(%s) AND status <> 'PENDING'", [ids])
        cursor.execute("UPDATE approvals_approval SET created_at = r.decided_at FROM approvals_confirmationrequest r "
                       "WHERE r.id = approvals_approval.request_id AND r.id = ANY(%s)", [ids])
        cursor.execute("ANALYZE approvals_confirmationrequest")
        cursor.execute("ANALYZE approvals_approval")


def _clear(tenant) -> None:
    """Remove the requests an earlier run of this script left (one statement; the ORM's cascade
    would list every id in one query, which PostgreSQL refuses past 65,535 parameters), and vacuum
    their tables."""
    from django.db import connection

    mine = "SELECT id FROM approvals_confirmationrequest WHERE tenant_id = %s AND tool_call_id LIKE %s"
    with connection.cursor() as cursor:
        for table in ("approvals_requestclaim", "approvals_requestview", "approvals_approval"):
            cursor.execute(f"DELETE FROM {table} WHERE request_id IN ({mine})", [tenant.pk, "scale\\_%"])
        cursor.execute(f"DELETE FROM approvals_confirmationrequest WHERE id IN ({mine})", [tenant.pk, "scale\\_%"])
        # The deleted rows stay as dead tuples until a vacuum (a server may run without autovacuum):
        # without this a second run would time its pages over the first run's dead rows.
        for table in ("approvals_requestclaim", "approvals_requestview", "approvals_approval",
                      "approvals_confirmationrequest"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")


def _surfaces(people: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    from django.test import Client

    from approvals.expiry import confirmations_expire_due

    approver, requester, administrator = Client(), Client(), Client()
    approver.force_login(people["approver1"])
    requester.force_login(people["requester"])
    administrator.force_login(people["admin"])  # the tenant's administrator: the admin scoped to acme
    tenant_id = people["requester"].tenant_id

    def get(client: Client, path: str) -> Callable[[], Any]:
        def call() -> Any:
            response = client.get(path, HTTP_HOST="127.0.0.1")
            assert response.status_code == 200, (path, response.status_code)
            return response
        return call

    return {
        "/approvals/history/": get(approver, "/approvals/history/"),
        "GET /api/v1/approvals/?status=history": get(approver, "/api/v1/approvals/?status=history"),
        "/approvals/ (pending tab)": get(approver, "/approvals/"),
        "/approvals/mine/": get(requester, "/approvals/mine/"),
        "GET /api/v1/my-requests/": get(requester, "/api/v1/my-requests/"),
        "admin: confirmation requests": get(administrator, "/admin/approvals/confirmationrequest/"),
        "admin: approvals": get(administrator, "/admin/approvals/approval/"),
        "expiry check (settle-on-read)": lambda: confirmations_expire_due(tenant_id=tenant_id),
    }


def _measure(surfaces: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[list[float], list[str]]]:
    """{surface: (times in ms, the SQL of its slowest statement in the last run)}."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    measured = {}
    for name, call in surfaces.items():
        call()  # warm
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            call()
            times.append(_common.elapsed_ms(started))
        with CaptureQueriesContext(connection) as captured:
            call()
        slowest = sorted(captured.captured_queries, key=lambda q: float(q["time"]), reverse=True)[:1]
        measured[name] = (times, [q["sql"] for q in slowest])
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1_000, help="decided requests at the small size")
    parser.add_argument("--large", type=int, default=100_000, help="decided requests at the large size")
    parser.add_argument("--waiting-small", type=int, default=9)
    parser.add_argument("--waiting-large", type=int, default=991)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    _common.setup()
    import logging

    logging.getLogger("agentplatform.access").setLevel(logging.WARNING)  # one line per page otherwise
    import _data

    people = _data.personas()
    requester = people["requester"]
    _clear(requester.tenant)
    _data.reset(tenant=requester.tenant)
    conversation = _data.conversation(user=requester, label="scale")
    _common.header("Scale: the approval surfaces at two sizes of one tenant's history", notes=[
        f"small: {args.small} decided + {args.waiting_small} waiting requests; "
        f"large: {args.large} decided + {args.waiting_large} waiting",
        f"{args.repeat} timed calls per surface and size after one warm-up; pages through Django's test client",
    ])
    approvers = [people["approver1"], people["approver2"]]
    _build(requester=requester, approvers=approvers, conversation=conversation, decided=args.small,
           waiting=args.waiting_small, start=0)
    small = _measure(_surfaces(people), args.repeat)
    _build(requester=requester, approvers=approvers, conversation=conversation, decided=args.large - args.small,
           waiting=args.waiting_large - args.waiting_small, start=args.small + args.waiting_small)
    large = _measure(_surfaces(people), args.repeat)

    print(f"\n  {'surface':40} {'small median':>13} {'p95':>9} {'large median':>13} {'p95':>9} {'growth':>7}")
    grown = []
    for name in small:
        s, b = _common.median_p95(small[name][0]), _common.median_p95(large[name][0])
        growth = b["median"] / s["median"] if s["median"] else float("inf")
        flag = "" if growth < GROWTH_LIMIT else "  <- grows"
        print(f"  {name:40} {s['median']:10.2f} ms {s['p95']:6.2f} ms {b['median']:10.2f} ms {b['p95']:6.2f} ms "
              f"{growth:6.1f}x{flag}")
        if growth >= GROWTH_LIMIT and large[name][1]:
            grown.append((name, large[name][1][0]))
    for name, sql in grown:
        print(f"\n  EXPLAIN of the slowest statement of {name} at the large size:")
        print(_common.explain_analyze(sql))
    _clear(requester.tenant)
    _data.reset(tenant=requester.tenant)
    print(f"\nload average at the end: {_common.load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
