"""Reads of the audit trail, always scoped by tenant."""
from __future__ import annotations

import datetime

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import QuerySet, Subquery

from audit.models import AuditEvent
from core.sql.literals import TimestampLiteral, integer_literal

CONTROL_CHANGE = AuditEvent.Decision.CONTROL_CHANGE  # written by agentplatform.controlplane
SPAN_ROWS_MAX = 20_000  # a time range with more rows is walked from the newest row down


def audit_events_for(
    *,
    tenant_id: int | None,
    tool: str | None = None,
    username: str | None = None,
    status: str | None = None,
    decision: str | None = None,
    occurred_from: datetime.datetime | None = None,
    occurred_to: datetime.datetime | None = None,
    kind: str | None = None,
    object_type: str | None = None,
    business_object: str | None = None,
) -> QuerySet[AuditEvent]:
    """The audit events of one tenant, filtered, oldest first (ordered by occurred_at, id).

    tool: exact tool name. username: the actor's username. status: the result code (exact).
    decision: an AuditEvent.Decision value. occurred_from (inclusive) / occurred_to (exclusive):
    aware datetimes. kind: "control" (control-plane changes, decision CONTROL_CHANGE) or "tool"
    (every other event). object_type: the control-plane object's type (masked_arguments.object.type).
    business_object: what the rows are about, exact (an order id; audit.subjects).
    A reader without a tenant (tenant_id None) gets nothing.
    """
    if tenant_id is None:
        return AuditEvent.objects.none()
    rows = AuditEvent.objects.filter(tenant_id=tenant_id).select_related("actor")
    if tool:
        rows = rows.filter(tool_name=tool)
    if username:
        rows = rows.filter(actor_id=actor_id_of(username))
    if status:
        rows = rows.filter(status=status)
    if decision:
        rows = rows.filter(decision=decision)
    if kind == "control":
        rows = rows.filter(decision=CONTROL_CHANGE)
    elif kind == "tool":
        rows = rows.exclude(decision=CONTROL_CHANGE)
    if object_type:
        rows = rows.filter(decision=CONTROL_CHANGE, masked_arguments__object__type=object_type)
    if business_object:
        rows = rows.filter(business_object=business_object)
    if occurred_from is not None or occurred_to is not None:
        rows = within(rows, tenant_id=tenant_id, occurred_from=occurred_from, occurred_to=occurred_to)
    return rows.order_by("occurred_at", "id")


def actor_id_of(username: str) -> Subquery:
    """The id of the user named `username` as a one-value subquery (NULL when nobody has it).

    A filter on `actor_id = (subquery)` lets PostgreSQL read the index (tenant, actor, chain_seq)
    in chain order; a join on the user's name would sort every row of the actor instead.
    """
    return Subquery(get_user_model().objects.filter(username=username).values("pk")[:1])


def within(rows: QuerySet[AuditEvent], *, tenant_id: int, occurred_from: datetime.datetime | None,
           occurred_to: datetime.datetime | None) -> QuerySet[AuditEvent]:
    """`rows` (of tenant `tenant_id`) that occurred in [occurred_from, occurred_to) (either bound
    may be None), also bounded by the chain positions of that range when it holds at most
    SPAN_ROWS_MAX rows (chain_span): a page in chain order then starts at the range's newest
    position instead of walking down from the head to reach it. Not evaluated.

    The times and chain positions are written into the statement (core.sql.literals): bound, a
    prepared statement's generic plan takes any range for a narrow one and sorts every row of the
    range by chain position (20,622 buffers against 10 for a page of a 100-day range of 10,000
    rows, tests/audit/test_list_plans.py).
    """
    span = chain_span(tenant_id=tenant_id, occurred_from=occurred_from, occurred_to=occurred_to)
    if span == (None, None):
        return rows.none()
    if span is not None:
        rows = rows.filter(chain_seq__gte=integer_literal(span[0]), chain_seq__lte=integer_literal(span[1]))
    if occurred_from is not None:
        rows = rows.filter(occurred_at__gte=TimestampLiteral(occurred_from))
    if occurred_to is not None:
        rows = rows.filter(occurred_at__lt=TimestampLiteral(occurred_to))
    return rows


def chain_span(*, tenant_id: int, occurred_from: datetime.datetime | None,
               occurred_to: datetime.datetime | None) -> tuple[int | None, int | None] | None:
    """(lowest, highest) chain position of the tenant's rows that occurred in the range, or
    (None, None) when it holds no row, or None when it holds more than SPAN_ROWS_MAX rows.

    Times and chain positions agree only roughly (a row's time is taken before it waits for the
    chain), so the bounds are the range's own rows', read from the index (tenant, occurred_at,
    chain_seq): at most SPAN_ROWS_MAX + 1 index entries, one statement. A wide range is left
    unbounded: its page is found within the first rows walked down from the head when it reaches
    the present, and an export reads the range anyway (audit.export).
    """
    where, params = ["tenant_id = %s", "chain_seq IS NOT NULL"], [tenant_id]
    if occurred_from is not None:
        where.append("occurred_at >= %s")
        params.append(connection.ops.adapt_datetimefield_value(occurred_from))
    if occurred_to is not None:
        where.append("occurred_at < %s")
        params.append(connection.ops.adapt_datetimefield_value(occurred_to))
    sql = (f"SELECT MIN(chain_seq), MAX(chain_seq), COUNT(*) FROM (SELECT chain_seq FROM "
           f"{AuditEvent._meta.db_table} WHERE {' AND '.join(where)} ORDER BY occurred_at LIMIT %s) AS span")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, SPAN_ROWS_MAX + 1])
        first, last, count = cursor.fetchone()
    if count > SPAN_ROWS_MAX:
        return None
    return first, last
