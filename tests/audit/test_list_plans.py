"""The auditor's lists and exports cost what their page shows, not what the tenant has ever done:
each filter of the audit API's first page is read from an index in chain order and stops at the
page's end (no Sort over the matching rows), reading about as many pages at 500 as at 10,000
rows; an export of one day reads about as many pages whatever lies outside that day; the admin
changelist neither counts nor lists the distinct values of the trail. Asserted on `EXPLAIN
(ANALYZE, BUFFERS)` and on the statements sent, not on time (bench/scale_audit.py times them).
"""
from __future__ import annotations

import datetime
import json
import re

import psycopg
import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditChainHead
from core import clock

pytestmark = pytest.mark.postgres

SMALL, LARGE = 500, 10_000
DAY = datetime.timedelta(days=1)
TOOLS = ["lookup_order", "cancel_order", "refund_order", "update_address"]
DECISIONS = ["EXECUTED", "ALLOWED", "EXECUTED", "DENIED", "CONFIRMATION_REQUIRED"]

# `count` rows of one tenant after its chain head, spread over the 100 days before `now`, none on
# the export day [day, day + 1) (those rows are moved a day later, so the day holds only the rows
# _day_rows writes, at every size).
INSERT_ROWS = """
INSERT INTO audit_auditevent (id, occurred_at, tenant_id, actor_id, request_id, tool_call_id, tool_name,
    tool_owner, tool_version, decision, policy_decision, status, arguments_hash, masked_arguments,
    idempotency_key, business_result_id, message, business_object, chain_seq, prev_hash, row_hash)
SELECT gen_random_uuid(), CASE WHEN t >= %(day)s AND t < %(day)s::timestamptz + interval '1 day'
                               THEN t + interval '1 day' ELSE t END,
       %(tenant)s, (%(actors)s::bigint[])[1 + n %% %(nactors)s], 'req-' || n, 'call_' || n,
       (%(tools)s::text[])[1 + n %% %(ntools)s], 'ops', '1', (%(decisions)s::text[])[1 + n %% %(ndecisions)s], 'ALLOW',
       (%(decisions)s::text[])[1 + n %% %(ndecisions)s], md5(n::text), NULL, '', '', '',
       'A9' || lpad((n %% 5)::text, 11, '0'), %(base)s + n, md5(n::text), md5((n + 1)::text)
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n,
     LATERAL (SELECT %(now)s::timestamptz - interval '100 days' + (n * %(step)s::float8) * interval '1 second' AS t) AS at
"""


def _grow(tenant_id: int, actors: list[int], count: int, *, day: datetime.datetime, first: int = 1) -> None:
    """Append `count` rows to the tenant's chain (numbered from `first` in the SQL's own sequence)."""
    base = AuditChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", flat=True).first() or 0
    with connection.cursor() as cursor:
        cursor.execute(INSERT_ROWS, {
            "day": day, "tenant": tenant_id, "actors": actors, "nactors": len(actors), "tools": TOOLS,
            "ntools": len(TOOLS), "decisions": DECISIONS, "ndecisions": len(DECISIONS), "base": base - first + 1,
            "first": first, "last": first + count - 1, "now": clock.now(), "step": 100 * 86400 / LARGE})
        cursor.execute("INSERT INTO audit_auditchainhead (tenant_id, seq, prev_hash, hash) VALUES (%s, %s, '', %s) "
                       "ON CONFLICT (tenant_id) DO UPDATE SET seq = EXCLUDED.seq", [tenant_id, base + count, "0" * 64])
        cursor.execute("ANALYZE audit_auditevent")


def _day_rows(tenant_id: int, actors: list[int], count: int, *, day: datetime.datetime) -> None:
    """`count` rows on the export day, appended to the chain."""
    base = AuditChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", flat=True).first() or 0
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditevent (id, occurred_at, tenant_id, actor_id, request_id, tool_call_id, tool_name, "
            "tool_owner, tool_version, decision, policy_decision, status, arguments_hash, idempotency_key, "
            "business_result_id, message, business_object, chain_seq, prev_hash, row_hash) "
            "SELECT gen_random_uuid(), %s::timestamptz + n * interval '1 minute', %s, %s, 'day-' || n, 'day_' || n, "
            "'cancel_order', 'ops', '1', 'EXECUTED', 'ALLOW', 'OK', md5(n::text), '', '', '', '', %s + n, "
            "md5(n::text), md5(n::text) FROM generate_series(1, %s) AS n",
            [day, tenant_id, actors[0], base, count])
        cursor.execute("UPDATE audit_auditchainhead SET seq = %s WHERE tenant_id = %s", [base + count, tenant_id])


def _explain(sql: str) -> dict:
    """The executed plan (JSON) of one captured statement, its values inlined as Django logged them."""
    connection.ensure_connection()
    with psycopg.ClientCursor(connection.connection) as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
        data = cursor.fetchone()[0]
    return (json.loads(data) if isinstance(data, str) else data)[0]["Plan"]


def _blocks(plan: dict) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _nodes(plan: dict) -> list[dict]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def _shape(plan: dict, depth: int = 0) -> str:
    """The plan as indented lines: node, index, rows, buffers (for assertion messages)."""
    line = (f"{'  ' * depth}{plan['Node Type']} {plan.get('Index Name', '')} rows={plan.get('Actual Rows')} "
            f"blocks={_blocks(plan)} {plan.get('Index Cond', '')} {plan.get('Sort Key', '')}")
    return "\n".join([line] + [_shape(child, depth + 1) for child in plan.get("Plans", [])])


def _most_rows(plan: dict) -> int:
    """The most rows any scan of the plan handled (returned or filtered out) over all its loops."""
    scans = [n for n in _nodes(plan) if "Scan" in n["Node Type"] and n.get("Relation Name") == "audit_auditevent"
             or n.get("Index Name", "").startswith("audit_event")]
    return max((int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0))) * int(n.get("Actual Loops", 1))
               for n in scans)


def _statements(client: Client, path: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
        if getattr(response, "streaming", False):
            b"".join(response.streaming_content)
    assert response.status_code == 200, (path, response.status_code, getattr(response, "content", b"")[:300])
    return [q["sql"] for q in captured.captured_queries]


def _page_statement(statements: list[str]) -> str:
    pages = [s for s in statements if 'FROM "audit_auditevent"' in s and "LIMIT" in s and "COUNT(" not in s
             and "AS span" not in s]
    assert len(pages) == 1, statements
    return pages[0]


@pytest.fixture
def trail(people):
    """acme's trail, an auditor's client and the actors; `grow(to=N)` appends rows up to N."""
    acme = people["acme"]
    auditor = acme["approver1"]
    auditor.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    client = Client()
    client.force_login(auditor)
    actors = [acme[name].pk for name in ("requester", "approver1", "approver2")]
    tenant_id = auditor.tenant_id
    day = (clock.now() - datetime.timedelta(days=50)).replace(hour=0, minute=0, second=0, microsecond=0)

    class Trail:
        def grow(self, *, to: int) -> None:
            have = self.have
            _grow(tenant_id, actors, to - have, day=day, first=have + 1)
            self.have = to

    t = Trail()
    t.have, t.client, t.tenant_id, t.day, t.actors, t.users = 0, client, tenant_id, day, actors, acme
    return t


def _iso(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _api_filters(trail) -> dict[str, tuple[str, str]]:
    """filter -> (query string, the index its page must be read from)."""
    now = clock.now() + datetime.timedelta(minutes=1)
    return {
        "none": ("", "audit_event_chain_position"),
        "tool": ("tool=refund_order", "audit_event_tool"),
        "status": ("status=DENIED", "audit_event_status"),
        "decision": ("decision=DENIED", "audit_event_decision"),
        "kind=control": ("kind=control", "audit_event_decision"),
        "user": (f"user={trail.users['approver2'].username}", "audit_event_actor"),
        "object": ("object=A900000000003", "audit_event_object"),
        "1-day range": (f"from={_iso(now - datetime.timedelta(days=98))}&to={_iso(now - datetime.timedelta(days=97))}",
                        "audit_event_chain_position"),
        "100-day range": (f"from={_iso(now - datetime.timedelta(days=100))}&to={_iso(now)}",
                          "audit_event_chain_position"),
    }


def _api_plans(trail) -> dict[str, tuple[dict, int]]:
    plans = {}
    for name, (query, _) in _api_filters(trail).items():
        statements = _statements(trail.client, f"/api/v1/audit-events/?{query}")
        plans[name] = (_explain(_page_statement(statements)), len(statements))
    return plans


def test_each_filter_of_the_audit_api_reads_one_page_from_its_index_at_500_and_10000_rows(trail, monkeypatch):
    # given: a few control changes of set-up, then 500 rows, measured; then 10,000. A range of
    # more than 1,000 rows counts as wide here (SPAN_ROWS_MAX; 20,000 in production).
    monkeypatch.setattr("audit.selectors.SPAN_ROWS_MAX", 1_000)
    trail.grow(to=SMALL)
    small = _api_plans(trail)
    trail.grow(to=LARGE)
    large = _api_plans(trail)

    for name, (_, index) in _api_filters(trail).items():
        (plan_s, count_s), (plan_l, count_l) = small[name], large[name]
        nodes = _nodes(plan_l)
        assert plan_l["Node Type"] == "Limit", (name, plan_l)
        if name == "1-day range":
            # a narrow range (its chain positions bound it, audit.selectors.within): PostgreSQL may
            # sort it, but only the day's 100 rows, never the tenant's
            assert _most_rows(plan_l) <= 150, _shape(plan_l)
            assert {"audit_event_time", "audit_event_chain_position"} & {n.get("Index Name") for n in nodes}
            continue
        else:
            assert not [n for n in nodes if "Sort" in n["Node Type"]], (name, _shape(plan_l))
            assert index in {n.get("Index Name") for n in nodes}, (name, index, _shape(plan_l))
        assert count_s == count_l, name
        # the page's rows and a level more of the index, never a page per matching row
        assert _blocks(plan_l) <= 2 * _blocks(plan_s) + 10, (name, _blocks(plan_s), _blocks(plan_l), plan_l)


def test_the_actor_filter_still_answers_only_that_actor_and_nobody_for_an_unknown_name(trail):
    trail.grow(to=SMALL)
    approver2 = trail.users["approver2"]
    rows = trail.client.get(f"/api/v1/audit-events/?user={approver2.username}&page_size=500").json()["results"]
    assert rows and {r["actor"] for r in rows} == {approver2.username}
    assert trail.client.get("/api/v1/audit-events/?user=no-such-person").json()["results"] == []


def _export_cost(trail, days: int) -> tuple[int, int, int]:
    """(lines, statements, buffers read by them) of the CSV export of `days` days from the export day."""
    query = f"format=csv&from={_iso(trail.day)}&to={_iso(trail.day + days * DAY)}"
    response = trail.client.get(f"/api/v1/audit-events/?{query}")
    lines = b"".join(response.streaming_content).decode().strip().splitlines()
    statements = [s for s in _statements(trail.client, f"/api/v1/audit-events/?{query}")
                  if 'FROM "audit_auditevent"' in s]
    return len(lines) - 1, len(statements), sum(_blocks(_explain(s)) for s in statements)


def test_an_export_of_one_day_reads_as_much_at_500_as_at_10000_rows_and_keeps_every_row(trail):
    # given: the day holds 120 rows at both sizes; the other rows lie on the other 99 days
    trail.grow(to=SMALL)
    _day_rows(trail.tenant_id, trail.actors, 120, day=trail.day)
    lines_s, statements_s, blocks_s = _export_cost(trail, 1)
    trail.grow(to=LARGE)
    lines_l, statements_l, blocks_l = _export_cost(trail, 1)

    assert lines_s == lines_l == 120
    assert statements_s == statements_l
    assert blocks_l <= 2 * blocks_s + 10, (blocks_s, blocks_l)


def test_an_export_of_a_range_is_in_chain_order_even_when_times_disagree_with_it(trail):
    # given: the day's rows, then rows of earlier days written after them (higher chain positions)
    trail.grow(to=SMALL)
    _day_rows(trail.tenant_id, trail.actors, 30, day=trail.day)
    trail.grow(to=2_000)
    query = f"format=jsonl&from={_iso(trail.day - 60 * DAY)}&to={_iso(trail.day + DAY)}"
    rows = [json.loads(line) for line in b"".join(trail.client.get(f"/api/v1/audit-events/?{query}")
                                                   .streaming_content).decode().splitlines()]
    # then: every row of the range, in chain order, though their times are not in that order
    seqs = [r["chain_seq"] for r in rows]
    assert seqs == sorted(seqs)
    assert [r["occurred_at"] for r in rows] != sorted(r["occurred_at"] for r in rows)
    assert sum(r["tool_call_id"].startswith("day_") for r in rows) == 30
    assert sum(r["tool_call_id"].startswith("call_") for r in rows) == 2_000


def _admin_statements(client: Client, path: str) -> list[str]:
    return _statements(client, path)


@pytest.mark.parametrize("query", ["", "?decision__exact=DENIED", "?tool_name=refund_order", "?status=DENIED",
                                   "?occurred=7d"])
def test_the_admin_changelist_neither_counts_nor_lists_the_distinct_values_of_the_trail(trail, acme_admin, query):
    client = Client()
    client.force_login(acme_admin)
    trail.grow(to=SMALL)
    small = _admin_statements(client, f"/admin/audit/auditevent/{query}")
    trail.grow(to=LARGE)
    large = _admin_statements(client, f"/admin/audit/auditevent/{query}")
    page = client.get(f"/admin/audit/auditevent/{query}").content.decode()

    # the same statements at both sizes, but for the estimate's EXPLAIN past the exact count's cap
    assert len([s for s in small if not s.startswith("EXPLAIN")]) == len([s for s in large if not s.startswith("EXPLAIN")])
    assert len([s for s in large if s.startswith("EXPLAIN")]) <= 1
    on_trail = [s for s in large if '"audit_auditevent"' in s]
    assert not [s for s in on_trail if "DISTINCT" in s], on_trail
    counts = [s for s in on_trail if "COUNT(" in s]
    assert counts and all(re.search(r"LIMIT 1001\)", s) for s in counts), counts
    for statement in on_trail:
        if statement.lstrip().startswith("EXPLAIN") or "WITH RECURSIVE" in statement:
            continue
        plan = _explain(statement)
        if "occurred" in query:  # the last 7 days' 700 rows at most, never the tenant's 10,000
            assert _most_rows(plan) <= 1_000, _shape(plan)
        else:
            assert not [n for n in _nodes(plan) if n["Node Type"] == "Sort"], (statement[-300:], _shape(plan))
    if not query:
        assert "an estimate" in page  # 10,000 rows: past the exact count's cap, and said so


@pytest.mark.parametrize("span_rows_max", [1_000, 20_000])
def test_each_filter_of_the_audit_api_keeps_its_plan_when_its_statements_are_prepared(trail, acme_admin, monkeypatch,
                                                                                     span_rows_max):
    """As prepared statements' generic plans (the tool, status, decision, user, object and range
    bound, unknown to the planner), no SELECT the audit API, its export and the admin changelist
    send for each filter may handle many more rows than the plan the values would get *and* grow with the
    trail (500, then 10,000 rows); with ranges of more rows than SPAN_ROWS_MAX (walked from the
    head) and of fewer (bounded by their chain positions)."""
    from tests.plan_support import generic_costs

    monkeypatch.setattr("audit.selectors.SPAN_ROWS_MAX", span_rows_max)
    admin = Client()
    admin.force_login(acme_admin)
    paths = {name: (trail.client, f"/api/v1/audit-events/?{query}") for name, (query, _) in _api_filters(trail).items()}
    paths.update({f"export {days} days": (trail.client, f"/api/v1/audit-events/?format=csv&from={_iso(trail.day)}"
                                                       f"&to={_iso(trail.day + days * DAY)}") for days in (1, 60)})
    paths.update({f"admin {query}": (admin, f"/admin/audit/auditevent/{query}")
                  for query in ("", "?decision__exact=DENIED", "?tool_name=refund_order", "?status=DENIED",
                                "?occurred=7d")})
    trail.grow(to=SMALL)
    fetches = {name: lambda client=client, path=path: _statements(client, path) for name, (client, path) in paths.items()}
    _, small = generic_costs(fetches)
    trail.grow(to=LARGE)
    costlier, _ = generic_costs(fetches, before=small)
    assert not [name for name, found in costlier.items() if found], "\n\n".join(
        f"{name}: " + "\n".join(found) for name, found in costlier.items() if found)
