"""The executed plans of the statements the code actually sends, for the plan tests.

A connection that keeps its statements prepared (psycopg prepares a statement after
DB_PREPARE_THRESHOLD runs) may get PostgreSQL's *generic* plan for it after five runs: a plan made
without the parameters' values. A statement whose custom plan is cheap because the planner sees a
rare value (a waiting status, one tool) can then walk another index over the whole tenant (the
expiry check did: docs/performance.md, "The expiry check's generic plan"). These helpers capture
what a call sends and re-run each statement under `EXPLAIN (ANALYZE, BUFFERS)` as the custom and as
the generic plan, in a savepoint rolled back afterwards.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterator

import psycopg
from django.db import connection, transaction


class _Rollback(Exception):
    pass


def captured(fn: Callable[[], Any], *, heads: tuple[str, ...] = ("SELECT", "WITH")) -> list[tuple[str, Any]]:
    """The statements `fn()` sends through Django's connection whose first word is one of `heads`:
    a list of (sql with %s placeholders, its parameters)."""
    sent = []

    def capture(execute, sql, params, many, context):
        if not many and sql.lstrip().split(None, 1)[0].upper() in heads:
            sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        fn()
    return sent


def preparable(fn: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The SELECTs `fn()` sends that a connection could prepare: run twice, the statements of the
    second run whose text the first run sent too (psycopg keys prepared statements on the text, so
    a statement whose text changes with every call, a literal "now minus 7 days" say, never gets a
    generic plan)."""
    first = {sql for sql, _ in captured(fn)}
    return [(sql, params) for sql, params in captured(fn) if sql in first]


def explain(sql: str, params: Any, *, plans: str = "custom") -> dict:
    """The executed plan (the JSON's top node) of `sql` with `params`: "custom" as sent once
    (values known to the planner), "generic" as the prepared statement's generic plan (values
    unknown: `plan_cache_mode = force_generic_plan`, then EXECUTE with the values). Run inside a
    savepoint that is rolled back, so a write explained leaves nothing."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                if plans == "custom":
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
                    result = cursor.fetchone()[0]
                else:
                    result = _generic(sql, params)
            raise _Rollback
    except _Rollback:
        pass
    data = json.loads(result) if isinstance(result, str) else result
    return data[0]["Plan"]


def _generic(sql: str, params: Any) -> Any:
    raw = connection.connection
    with raw.cursor() as prepared:
        prepared.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        prepared.execute(sql, params, prepare=True)
        prepared.execute("SELECT name FROM pg_prepared_statements ORDER BY prepare_time DESC LIMIT 1")
        [name] = prepared.fetchone()
        values = psycopg.ClientCursor(raw).mogrify(", ".join(["%s"] * len(params)), params) if params else ""
        prepared.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}{f'({values})' if values else ''}")
        return prepared.fetchone()[0]


def nodes(plan: dict) -> Iterator[dict]:
    """Every node of a plan, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def blocks(plan: dict) -> int:
    """Shared buffers the plan's top node read (hit or from disk), its children included."""
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def shape(plan: dict, depth: int = 0) -> str:
    """The plan as indented lines (node, index, rows, buffers), for assertion messages."""
    line = (f"{'  ' * depth}{plan['Node Type']} {plan.get('Index Name', plan.get('Relation Name', ''))} "
            f"rows={plan.get('Actual Rows')} blocks={blocks(plan)} {plan.get('Index Cond', '')} "
            f"{plan.get('Filter', '')} {plan.get('Sort Key', '')}")
    return "\n".join([line] + [shape(child, depth + 1) for child in plan.get("Plans", [])])


# Tables that grow with what the tenants do. The others (users, tools, permissions, groups) are
# sized by configuration; in the suite's database they also carry every earlier test's dead rows
# (no autovacuum), which a generic plan may scan without that saying anything about the history.
GROWING = {"approvals_confirmationrequest", "approvals_approval", "approvals_requestclaim",
           "approvals_requestview", "audit_auditevent", "runtime_run", "runtime_message", "runtime_runevent"}


def rows_handled(plan: dict) -> int:
    """Rows the plan's scans of GROWING tables returned or threw away, over all their loops."""
    total = 0
    for node in nodes(plan):
        if node.get("Relation Name") not in GROWING or "Scan" not in node["Node Type"]:
            continue
        kept = int(node.get("Actual Rows", 0))
        dropped = int(node.get("Rows Removed by Filter", 0)) + int(node.get("Rows Removed by Index Recheck", 0))
        total += (kept + dropped) * int(node.get("Actual Loops", 1) or 1)
    return total


def generic_costlier(statements: list[tuple[str, Any]], *, slack: int = 100,
                     before: list[int] | None = None) -> tuple[list[str], list[int]]:
    """Of `statements`, those whose generic plan handles more than twice the rows of GROWING tables
    that their custom plan handles plus `slack`, and (given `before`: the same statements' generic
    figures on a smaller history, in the same order) more than twice those plus `slack` too: a
    generic plan that walks more than the page and grows with the history. Returns (one line per
    such statement with both plans' shapes, the generic plans' rows handled in order)."""
    found, handled = [], []
    for k, (sql, params) in enumerate(statements):
        custom, generic = explain(sql, params), explain(sql, params, plans="generic")
        rows = rows_handled(generic)
        handled.append(rows)
        if rows <= 2 * rows_handled(custom) + slack:
            continue
        if before is not None and k < len(before) and rows <= 2 * before[k] + slack:
            continue
        found.append(f"{' '.join(sql.split())[:400]}\n  params {params}\n  custom ({rows_handled(custom)} rows):\n"
                     f"{shape(custom)}\n  generic ({rows} rows):\n{shape(generic)}")
    return found, handled


def generic_costs(fetches: dict[str, Callable[[], Any]],
                  before: dict[str, list[int]] | None = None) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    """For each surface (name -> a call that fetches it once), `generic_costlier` of the statements
    it sends that a connection could prepare (`preparable`). Returns ({surface: flagged statements},
    {surface: the rows its generic plans handled}); `before` is the second from a smaller history."""
    costlier, costs = {}, {}
    for name, fetch in fetches.items():
        statements = preparable(fetch)
        assert statements, name
        costlier[name], costs[name] = generic_costlier(statements, before=(before or {}).get(name))
    return costlier, costs
