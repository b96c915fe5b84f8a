"""Approval quality: are approvals real reviews? Read-only selectors over one tenant's approver
decisions in a window (docs/approvals.md, "Approval quality").

Per approver and per tool:
- time to decide: seconds from the request's creation (when it started waiting for people) to
  the decision; median and 90th percentile (PostgreSQL's percentile_cont; on SQLite the same
  linear interpolation from window functions);
- approve / reject / edit / respond counts (rates are count / decisions);
- unviewed: decisions made with no RequestView of that approver for that request before them;
- fast: decisions made less than APPROVAL_FAST_DECISION_SECONDS after the approver first opened
  the request's facts (the reading time; unviewed decisions are counted apart, never twice).

Everything is computed by aggregate SQL: one statement reads the window's decisions once and
groups them three ways (per approver, per tool, all); SQLite's percentile fallback is one more.
The cost grows with the rows the database reads, not with Python work per decision.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q

from approvals.models import Approval, ConfirmationRequest, RequestView
from approvals.quality_window import Window, window_last_days  # noqa: F401 - re-exported for callers
from core import clock

GROUPS = {"approver": "CAST(approver_id AS TEXT)", "tool": "tool_name", "all": "'all'"}  # fixed SQL only
DECISIONS = tuple(Approval.Decision.values)  # APPROVE, REJECT, EDIT, RESPOND


@dataclass(frozen=True)
class DecisionStats:
    """One row of the quality table. `key`: the approver's user id, the tool's name, or "all".
    Seconds are floats (None when there are no decisions)."""

    key: int | str
    decisions: int
    approve: int
    reject: int
    edit: int
    respond: int
    unviewed: int
    fast: int
    median_seconds: float | None
    p90_seconds: float | None

    def rate(self, count: int) -> float:
        """`count` as a share of the decisions, 0.0 to 1.0 (0.0 without decisions)."""
        return count / self.decisions if self.decisions else 0.0

    @property
    def hasty(self) -> int:
        """Decisions that were not a review: unviewed or fast (disjoint)."""
        return self.unviewed + self.fast


def fast_decision_seconds() -> float:
    """The APPROVAL_FAST_DECISION_SECONDS setting (default 10) as seconds."""
    return float(getattr(settings, "APPROVAL_FAST_DECISION_SECONDS", 10))


def _seconds(later: str, earlier: str) -> str:
    """SQL for `later - earlier` in seconds (a float) on this database."""
    if connection.vendor == "postgresql":
        return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"
    return f"((julianday({later}) - julianday({earlier})) * 86400.0)"


def _decisions_cte() -> str:
    """WITH base, d, g: `d` has one row per decision of the window: approver_id, tool_name,
    decision, secs (time to decide), read_secs (from the approver's first view; NULL without one),
    unviewed (0/1); `g` repeats d's rows under each grouping (kind in GROUPS, grp), so one GROUP BY
    answers all three tables. The first view is an index lookup on RequestView (request, user,
    viewed_at) per decision."""
    a, r, v = Approval._meta.db_table, ConfirmationRequest._meta.db_table, RequestView._meta.db_table
    grouped = " UNION ALL ".join(
        f"SELECT '{kind}' AS kind, {expr} AS grp, decision, secs, read_secs, unviewed FROM d"
        for kind, expr in GROUPS.items())
    return f"""
WITH base AS (
  SELECT a.approver_id AS approver_id, r.tool_name AS tool_name, a.decision AS decision,
    a.created_at AS decided_at, r.created_at AS asked_at,
    (SELECT MIN(v.viewed_at) FROM {v} v WHERE v.request_id = a.request_id AND v.user_id = a.approver_id
       AND v.viewed_at <= a.created_at) AS first_view
  FROM {a} a JOIN {r} r ON r.id = a.request_id
  WHERE r.tenant_id = %s AND a.created_at >= %s AND a.created_at < %s
), d AS (
  SELECT approver_id, tool_name, decision, {_seconds('decided_at', 'asked_at')} AS secs,
    {_seconds('decided_at', 'first_view')} AS read_secs,
    CASE WHEN first_view IS NULL THEN 1 ELSE 0 END AS unviewed
  FROM base
), g AS ({grouped})"""


def _params(tenant_id: int, window: Window) -> list:
    ops = connection.ops
    return [tenant_id, ops.adapt_datetimefield_value(window.since), ops.adapt_datetimefield_value(window.until)]


def quality_tables(*, tenant_id: int, window: Window,
                   fast_seconds: float | None = None) -> dict[str, list[DecisionStats]]:
    """Quality of tenant `tenant_id`'s approver decisions made in `window` (Approval.created_at in
    [since, until)), in one statement: {"approver": [DecisionStats, key = user id], "tool": [...,
    key = tool name], "all": [one DecisionStats, or none without decisions]}, each ordered by
    decisions, most first. fast_seconds: the threshold (default APPROVAL_FAST_DECISION_SECONDS)."""
    threshold = fast_decision_seconds() if fast_seconds is None else float(fast_seconds)
    counts = ", ".join(f"SUM(CASE WHEN decision = '{d}' THEN 1 ELSE 0 END)" for d in DECISIONS)
    postgres = connection.vendor == "postgresql"
    percentiles = (", percentile_cont(0.5) WITHIN GROUP (ORDER BY secs), "
                   "percentile_cont(0.9) WITHIN GROUP (ORDER BY secs)") if postgres else ""
    sql = (f"{_decisions_cte()} SELECT kind, grp, COUNT(*), {counts}, SUM(unviewed), "
           f"SUM(CASE WHEN unviewed = 0 AND read_secs < %s THEN 1 ELSE 0 END){percentiles} "
           "FROM g GROUP BY kind, grp")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*_params(tenant_id, window), threshold])
        rows = cursor.fetchall()
    fallback = {} if postgres else _percentiles_by_window(tenant_id=tenant_id, window=window)
    tables: dict[str, list[DecisionStats]] = {kind: [] for kind in GROUPS}
    for row in rows:
        kind, key, total, approve, reject, edit, respond, unviewed, fast = row[:9]
        p50, p90 = (row[9], row[10]) if postgres else fallback.get((kind, key), (None, None))
        tables[kind].append(DecisionStats(
            key=int(key) if kind == "approver" else str(key), decisions=int(total), approve=int(approve or 0),
            reject=int(reject or 0), edit=int(edit or 0), respond=int(respond or 0), unviewed=int(unviewed or 0),
            fast=int(fast or 0), median_seconds=_float(p50), p90_seconds=_float(p90)))
    return {kind: sorted(stats, key=lambda s: (-s.decisions, str(s.key))) for kind, stats in tables.items()}


def decision_stats(*, tenant_id: int, window: Window, by: str = "approver",
                   fast_seconds: float | None = None) -> list[DecisionStats]:
    """One of quality_tables()'s tables: `by` is "approver", "tool" or "all". Raises KeyError for
    another `by`."""
    return quality_tables(tenant_id=tenant_id, window=window, fast_seconds=fast_seconds)[by]


def _float(value) -> float | None:
    return None if value is None else round(float(value), 3)


def _percentiles_by_window(*, tenant_id: int, window: Window) -> dict:
    """{(kind, grp): (p50, p90)} like percentile_cont, for databases without it (SQLite): window
    functions number each group's sorted times and return only the (at most four) rows next to
    each percentile's position; the interpolation between two neighbours runs once per group."""
    positions = []
    for p in (0.5, 0.9):
        lower = f"CAST((n - 1) * {p} AS INTEGER)"
        positions += [lower, f"{lower} + 1"]
    sql = (f"{_decisions_cte()}, ranked AS (SELECT kind, grp, secs, "
           "ROW_NUMBER() OVER (PARTITION BY kind, grp ORDER BY secs) - 1 AS i, "
           "COUNT(*) OVER (PARTITION BY kind, grp) AS n FROM g) "
           f"SELECT kind, grp, n, i, secs FROM ranked WHERE i IN ({', '.join(positions)})")
    with connection.cursor() as cursor:
        cursor.execute(sql, _params(tenant_id, window))
        found: dict = {}
        for kind, grp, n, i, secs in cursor.fetchall():
            found.setdefault((kind, grp), (n, {}))[1][i] = float(secs)
    return {key: tuple(_interpolate(values, n, p) for p in (0.5, 0.9)) for key, (n, values) in found.items()}


def _interpolate(values: dict[int, float], n: int, p: float) -> float:
    """percentile_cont's value at fraction p of n sorted values, given the values at its neighbours."""
    position = (n - 1) * p
    lower = int(position)
    low = values[lower]
    high = values.get(lower + 1, low)
    return low + (position - lower) * (high - low)


def expired_unseen(*, tenant_id: int, window: Window, now: datetime.datetime | None = None) -> list[dict]:
    """Approver-gated requests of tenant `tenant_id` that expired in `window` (expires_at in
    [since, until); marked EXPIRED, or due and not swept yet), per tool:
    [{"tool_name", "expired", "unseen"}], `unseen` = nobody ever opened their facts. Most first."""
    now = now or clock.now()
    seen = RequestView.objects.filter(request_id=OuterRef("pk"))
    rows = (ConfirmationRequest.objects
            .filter(Q(status=ConfirmationRequest.Status.EXPIRED)
                    | Q(status=ConfirmationRequest.Status.PENDING, expires_at__lte=now),
                    tenant_id=tenant_id, policy=ConfirmationRequest.Policy.APPROVERS,
                    expires_at__gte=window.since, expires_at__lt=window.until)
            .values("tool_name").annotate(expired=Count("pk"), unseen=Count("pk", filter=~Exists(seen)))
            .order_by("-expired", "tool_name"))
    return [dict(row) for row in rows]
