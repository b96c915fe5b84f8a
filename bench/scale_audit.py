"""Scale: what each audit surface costs as one tenant's trail grows.

Builds two bench tenants' audit trails, one at each size (default 10,000 and 1,000,000 rows), with
INSERT ... SELECT generate_series (seconds, not the ORM's minutes), spread evenly over the 100
days before now in chain order (with a few seconds of jitter, so times and chain positions do not
agree row by row). Then times, for each size: the audit API's first page unfiltered and filtered by
tool, status, user, business object, a 1-day and a 100-day range; the CSV export of one day (and of
four days at the large size); the auditor's `/audit/` page; the admin changelist of audit events,
unfiltered and filtered, as the platform operator (every tenant's rows: the same table at both
sizes) and as the tenant's administrator. Prints median and p95 at each size, the growth ratio, and EXPLAINs the
slowest statement of every surface that grows 1.5x or more.

    createdb -h 127.0.0.1 -U postgres ap_audit_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_audit_bench python bench/scale_audit.py
    DATABASE_URL=... python bench/scale_audit.py --small 10000 --large 1000000 --repeat 15

The chain columns are synthetic (unique positions, made-up hashes): no surface timed here verifies
the chain. Audit rows cannot be deleted (the append-only triggers), so the bench tenants
(`bench-audit-<size>`) are kept and reused by the next run at the same size; to start afresh, drop
the bench database (`dropdb -h 127.0.0.1 -U postgres ap_audit_bench`).
"""
from __future__ import annotations

import argparse
import datetime
import time
from typing import Any, Callable

import _common

GROWTH_LIMIT = 1.5  # a page may cost at most 1.5x more at 100x the trail
DAYS = 100
TOOLS = ["lookup_order", "cancel_order", "refund_order", "update_address", "track_shipment", "list_orders",
         "create_ticket", "send_email"]
DECISIONS = ["EXECUTED", "EXECUTED", "ALLOWED", "EXECUTED", "CONFIRMATION_REQUIRED", "CONFIRMED", "DENIED",
             "EXECUTED", "FAILED", "IDEMPOTENT_HIT"]
ACTORS = 5

# One row per n: tool, decision, status and actor cycle; the business object repeats every 5,000
# rows; times run from 100 days ago to now in chain order, each a few seconds off its neighbours.
INSERT_ROWS = """
INSERT INTO audit_auditevent (id, occurred_at, tenant_id, actor_id, request_id, conversation_id, run_id,
    tool_call_id, tool_name, tool_owner, tool_version, decision, policy_decision, status, arguments_hash,
    masked_arguments, confirmation_id, idempotency_key, business_result_id, duration_ms, message, execution,
    policy_version, policy_rules, channel, business_object, chain_seq, prev_hash, row_hash)
SELECT gen_random_uuid(),
       %(start)s::timestamptz + (n * %(step)s::float8) * interval '1 second' + ((n * 7919) %% 7) * interval '1 second',
       %(tenant)s, (%(actors)s::bigint[])[1 + n %% %(nactors)s], 'req-' || n, NULL, NULL,
       'call_' || n, (%(tools)s::text[])[1 + n %% %(ntools)s], 'ops', '1', (%(decisions)s::text[])[1 + n %% 10],
       'ALLOW', (%(decisions)s::text[])[1 + n %% 10], md5(n::text) || md5((n + 1)::text),
       jsonb_build_object('order_id', 'A9' || lpad((n %% 5000)::text, 11, '0')), NULL, '', '', 12.5, 'bench',
       NULL, NULL, NULL, NULL, 'A9' || lpad((n %% 5000)::text, 11, '0'), %(base)s + n,
       md5((n - 1)::text) || md5(n::text), md5(n::text) || md5((n - 1)::text)
FROM generate_series(1::bigint, %(count)s::bigint) AS n
"""


def _tenant(size: int) -> tuple[Any, Any, list]:
    """The bench tenant of `size` rows (built once), its auditor (who may read the trail) and actors."""
    from django.contrib.auth.models import Permission
    from django.db import connection

    from agentplatform.tenancy.models import Tenant, User
    from audit.models import AuditChainHead, AuditEvent

    tenant, _ = Tenant.objects.get_or_create(slug=f"bench-audit-{size}", defaults={"name": f"Bench audit {size}"})
    auditor, _ = User.objects.get_or_create(username=f"bench_audit_{size}_auditor", defaults={"tenant": tenant})
    auditor.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    actors = [User.objects.get_or_create(username=f"bench_audit_{size}_u{k}", defaults={"tenant": tenant})[0]
              for k in range(ACTORS)]
    have = AuditEvent.objects.filter(tenant=tenant, request_id__startswith="req-").count()
    if have not in (0, size):
        raise SystemExit(f"bench tenant {tenant.slug} holds {have} rows, not 0 or {size}: drop the bench database")
    if have == 0:
        started = time.perf_counter()
        start = _common_now() - datetime.timedelta(days=DAYS)
        # after the rows the set-up wrote (the tenant's users and grants are audited too)
        base = AuditChainHead.objects.filter(tenant=tenant).values_list("seq", flat=True).first() or 0
        with connection.cursor() as cursor:
            cursor.execute(INSERT_ROWS, {"base": base,
                "start": start, "step": DAYS * 86400 / size, "tenant": tenant.pk, "actors": [a.pk for a in actors],
                "nactors": ACTORS, "tools": TOOLS, "ntools": len(TOOLS), "decisions": DECISIONS, "count": size})
            cursor.execute("INSERT INTO audit_auditchainhead (tenant_id, seq, prev_hash, hash) VALUES (%s, %s, '', %s) "
                           "ON CONFLICT (tenant_id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash",
                           [tenant.pk, base + size, "0" * 64])
        print(f"  built {size} rows of {tenant.slug} in {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE audit_auditevent")
    return tenant, auditor, actors


def _common_now() -> datetime.datetime:
    from core import clock

    return clock.now().replace(microsecond=0)


def _surfaces(tenant, auditor, actors, *, large: bool) -> dict[str, Callable[[], Any]]:
    from django.test import Client

    from agentplatform.tenancy.models import User

    api, operator = Client(), Client()
    api.force_login(auditor)
    admin_user, _ = User.objects.get_or_create(username="bench_audit_operator",
                                               defaults={"is_superuser": True, "is_staff": True})
    operator.force_login(admin_user)
    tenant_admin = Client()
    staff, _ = User.objects.get_or_create(username=f"{auditor.username}_admin",
                                          defaults={"is_staff": True, "tenant": tenant})
    tenant_admin.force_login(staff)
    now = _common_now()
    day = (now - datetime.timedelta(days=DAYS // 2)).replace(hour=0, minute=0, second=0)

    def iso(at: datetime.datetime) -> str:
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")

    def get(client: Client, path: str, *, stream: bool = False) -> Callable[[], Any]:
        def call() -> Any:
            response = client.get(path, HTTP_HOST="127.0.0.1")
            assert response.status_code == 200, (path, response.status_code)
            if stream:
                return sum(len(chunk) for chunk in response.streaming_content)
            return response.content
        return call

    one_day = f"from={iso(day)}&to={iso(day + datetime.timedelta(days=1))}"
    surfaces = {
        "API first page": get(api, "/api/v1/audit-events/"),
        "API ?tool=": get(api, "/api/v1/audit-events/?tool=refund_order"),
        "API ?status=": get(api, "/api/v1/audit-events/?status=DENIED"),
        "API ?user=": get(api, f"/api/v1/audit-events/?user={actors[2].username}"),
        "API ?object=": get(api, "/api/v1/audit-events/?object=A900000001234"),
        "API 1-day range": get(api, f"/api/v1/audit-events/?{one_day}"),
        "API 100-day range": get(api, f"/api/v1/audit-events/?from={iso(now - datetime.timedelta(days=DAYS))}&to={iso(now)}"),
        "/audit/ page ?tool=": get(api, "/audit/?tool=refund_order"),
        "CSV export, 1 day": get(api, f"/api/v1/audit-events/?format=csv&{one_day}", stream=True),
        "admin changelist": get(operator, "/admin/audit/auditevent/"),
        "admin (tenant admin)": get(tenant_admin, "/admin/audit/auditevent/"),
        "admin (tenant admin) ?tool": get(tenant_admin, "/admin/audit/auditevent/?tool_name=refund_order"),
        "admin ?decision= &tenant=": get(operator, f"/admin/audit/auditevent/?decision__exact=DENIED"
                                                   f"&tenant__id__exact={tenant.pk}"),
    }
    if large:
        four_days = f"from={iso(day)}&to={iso(day + datetime.timedelta(days=4))}"
        surfaces["CSV export, 4 days"] = get(api, f"/api/v1/audit-events/?format=csv&{four_days}", stream=True)
    return surfaces


def _measure(surfaces: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[list[float], list[str], int]]:
    """{surface: (times in ms, the SQL of its slowest statement in the last run, statements)}."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    measured = {}
    for name, call in surfaces.items():
        call()  # warm
        times = []
        for _ in range(repeat if "4 days" not in name and "export" not in name else max(3, repeat // 3)):
            started = time.perf_counter()
            call()
            times.append(_common.elapsed_ms(started))
        with CaptureQueriesContext(connection) as captured:
            call()
        slowest = sorted(captured.captured_queries, key=lambda q: float(q["time"]), reverse=True)[:1]
        measured[name] = (times, [q["sql"] for q in slowest], len(captured.captured_queries))
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=10_000, help="audit rows of the small tenant")
    parser.add_argument("--large", type=int, default=1_000_000, help="audit rows of the large tenant")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--explain-all", action="store_true", help="EXPLAIN every surface's slowest statement")
    args = parser.parse_args()
    _common.setup()
    import logging

    logging.getLogger("agentplatform.access").setLevel(logging.WARNING)  # one line per page otherwise
    _common.header("Scale: the audit surfaces at two sizes of one tenant's trail", notes=[
        f"small: {args.small} audit rows; large: {args.large} (each its own tenant, over {DAYS} days)",
        f"{args.repeat} timed calls per surface and size after one warm-up (exports: a third as many); "
        "pages through Django's test client",
    ])
    small_tenant = _tenant(args.small)
    large_tenant = _tenant(args.large)
    small = _measure(_surfaces(*small_tenant, large=False), args.repeat)
    large = _measure(_surfaces(*large_tenant, large=True), args.repeat)

    print(f"\n  {'surface':28} {'small median':>13} {'p95':>9} {'large median':>13} {'p95':>9} {'growth':>7} "
          f"{'stmts':>7}")
    grown = []
    for name in large:
        b = _common.median_p95(large[name][0])
        if name not in small:
            one = _common.median_p95(large["CSV export, 1 day"][0])["median"]
            print(f"  {name:28} {'':>13} {'':>9} {b['median']:10.2f} ms {b['p95']:6.2f} ms "
                  f"{b['median'] / one:6.1f}x of 1 day")
            continue
        s = _common.median_p95(small[name][0])
        growth = b["median"] / s["median"] if s["median"] else float("inf")
        flag = "" if growth < GROWTH_LIMIT else "  <- grows"
        print(f"  {name:28} {s['median']:10.2f} ms {s['p95']:6.2f} ms {b['median']:10.2f} ms {b['p95']:6.2f} ms "
              f"{growth:6.1f}x {small[name][2]:>3}/{large[name][2]:<3}{flag}")
        if (growth >= GROWTH_LIMIT or args.explain_all) and large[name][1]:
            grown.append((name, large[name][1][0]))
    for name, sql in grown:
        print(f"\n  EXPLAIN of the slowest statement of {name} at the large size:")
        print(_common.explain_analyze(sql))
    print(f"\nload average at the end: {_common.load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
