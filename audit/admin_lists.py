"""The admin changelist of audit events at a million rows: filters whose choices cost no scan of
the trail, and a paginator that does not count it.

Django's defaults read every row of the trail on each changelist view: a list filter on a plain
column lists its values with `SELECT DISTINCT` over the table, `date_hierarchy` lists the years
with another DISTINCT, and the paginator counts the filtered rows exactly. Here the tool filter
(audit.admin, the entry point that may read the Tool rows) lists the Tool rows in scope, the status filter the statuses of the tenant in scope read by a
skip scan of the index (tenant, status, chain_seq) (one index descent per distinct status), the
time filter has fixed choices, and the paginator counts at most COUNT_CAP rows, beyond which it
shows the planner's estimate, labelled as one (docs/audit.md "The admin's list of audit events").
"""
from __future__ import annotations

import datetime
import json
from functools import cached_property

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet

from agentplatform.tenancy.admin_scope import tenant_in_scope
from audit.models import AuditEvent
from audit.selectors import within
from core import clock
from core.sql.literals import TimestampLiteral

COUNT_CAP = 1_000  # rows counted exactly; past it the count is the planner's estimate
MAX_PAGES = 100  # deeper pages would read (page x 100) rows to skip them: filter instead
STATUS_CHOICES_MAX = 200
RECENT = {"1h": datetime.timedelta(hours=1), "24h": datetime.timedelta(days=1),
          "7d": datetime.timedelta(days=7), "30d": datetime.timedelta(days=30)}


def statuses_of(tenant_id: int) -> list[str]:
    """The distinct result codes in tenant `tenant_id`'s trail (at most STATUS_CHOICES_MAX), sorted.

    A skip scan: each step asks the index (tenant, status, chain_seq) for the next status after
    the last one, so the cost grows with the number of distinct codes, not of rows.
    """
    table = AuditEvent._meta.db_table
    sql = (f"WITH RECURSIVE codes(status) AS ("
           f"SELECT MIN(status) FROM {table} WHERE tenant_id = %s "
           f"UNION ALL SELECT (SELECT MIN(status) FROM {table} WHERE tenant_id = %s AND status > codes.status) "
           f"FROM codes WHERE codes.status IS NOT NULL) "
           f"SELECT status FROM codes WHERE status IS NOT NULL LIMIT %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant_id, tenant_id, STATUS_CHOICES_MAX])
        return [row[0] for row in cursor.fetchall()]


class StatusFilter(admin.SimpleListFilter):
    """By result code (`?status=`): the codes of the tenant in scope (statuses_of); with every
    tenant listed, only the code already chosen is offered (pick a tenant first)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        tenant_id = tenant_in_scope(request)
        codes = set(statuses_of(tenant_id)) if tenant_id is not None else set()
        if self.value():
            codes.add(self.value())
        return [(code, code or "(blank)") for code in sorted(codes)]

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


class RecentFilter(admin.SimpleListFilter):
    """By time (`?occurred=1h|24h|7d|30d`): the rows of the last hour, day, week or month."""

    title = "occurred"
    parameter_name = "occurred"

    def lookups(self, request, model_admin):
        return [("1h", "Last hour"), ("24h", "Last 24 hours"), ("7d", "Last 7 days"), ("30d", "Last 30 days")]

    def queryset(self, request, queryset):
        window = RECENT.get(self.value() or "")
        if not window:
            return queryset
        tenant_id = tenant_in_scope(request)
        if tenant_id is None:
            return queryset.filter(occurred_at__gte=TimestampLiteral(clock.now() - window))  # see audit.selectors.within
        return within(queryset, tenant_id=tenant_id, occurred_from=clock.now() - window, occurred_to=None)


class EstimatedCountPaginator(Paginator):
    """A paginator whose count reads at most COUNT_CAP + 1 rows.

    `count`: exact when the rows are fewer than COUNT_CAP (`estimated` False); otherwise the
    planner's estimate of the filtered rows, at least COUNT_CAP (`estimated` True; on a database
    without a row estimate, COUNT_CAP). `num_pages` stops at MAX_PAGES.
    """

    estimated = False

    @cached_property
    def count(self) -> int:
        queryset: QuerySet = self.object_list
        counted = queryset.order_by().values("pk")[:COUNT_CAP + 1].count()
        if counted <= COUNT_CAP:
            return counted
        self.estimated = True
        return max(COUNT_CAP + 1, _planner_rows(queryset))

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, MAX_PAGES)


def _planner_rows(queryset: QuerySet) -> int:
    """PostgreSQL's estimate of how many rows `queryset` returns (0 elsewhere or when unknown)."""
    if connection.vendor != "postgresql":
        return 0
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"].get("Plan Rows", 0))
