"""The auditor's reading of one tenant's trail: newest first, filtered, paged by keyset.

Paging walks the tenant's chain position downwards (`chain_seq < before`, the unique index
(tenant, chain_seq)), so page 10,000 costs what page 1 costs: no OFFSET, and no COUNT(*) over the
trail (the total shown is the chain head's position, one row). A search by business object uses
the index (tenant, business_object, chain_seq) (audit.subjects).

Set-up rows: control-plane changes written by no person outside any web request (the demo's
set-up, `manage.py` commands, migrations: decision CONTROL_CHANGE, no actor, no request id). They
are hidden unless `setup=True`; everything a signed-in person or the agent did stays visible.
"""
from __future__ import annotations

import datetime
import re
import uuid
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from audit.models import AuditChainHead, AuditEvent
from audit.selectors import actor_id_of, within

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
OUTCOMES = {  # the outcome filter's plain choices -> decisions
    "done": ("EXECUTED", "IDEMPOTENT_HIT", "CONSUMED"),
    "waiting": ("CONFIRMATION_REQUIRED",),
    "approved": ("APPROVED", "CONFIRMED", "EDITED", "RESPONDED"),
    "stopped": ("DENIED", "INVALID", "NOT_FOUND", "REFUSED", "REJECTED", "CANCELLED", "EXPIRED", "WITHDRAWN", "FAILED"),
}
SETUP_ROWS = Q(decision=AuditEvent.Decision.CONTROL_CHANGE, actor__isnull=True, request_id="")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class TrailFilter:
    """What the auditor asked for. tool: exact tool name. decision: an AuditEvent.Decision value.
    outcome: a key of OUTCOMES. status: result code (exact). actor: username (exact). since /
    until: aware datetimes (since inclusive, until exclusive). search: a business object (an order
    id, a tracking number, a username of a control change), or an id (row, run, conversation,
    request, business result) when it is a UUID. setup: include set-up rows."""

    tool: str = ""
    decision: str = ""
    outcome: str = ""
    status: str = ""
    actor: str = ""
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    search: str = ""
    setup: bool = False


@dataclass
class TrailPage:
    """One page: rows newest first; `next_before` is the chain position to pass as `before` for the
    next (older) page, or None at the end; `head_seq`: the tenant's number of chained rows."""

    rows: list[AuditEvent]
    next_before: int | None
    head_seq: int
    newer: bool = field(default=False)


def trail_rows(*, tenant_id: int, filters: TrailFilter) -> QuerySet[AuditEvent]:
    """The tenant's rows matching `filters`, newest first (by chain position); not evaluated."""
    rows = AuditEvent.objects.filter(tenant_id=tenant_id)
    if not filters.setup:
        rows = rows.exclude(SETUP_ROWS)
    if filters.tool:
        rows = rows.filter(tool_name=filters.tool)
    if filters.decision:
        rows = rows.filter(decision=filters.decision)
    if filters.outcome in OUTCOMES:
        rows = rows.filter(decision__in=OUTCOMES[filters.outcome])
    if filters.status:
        rows = rows.filter(status=filters.status)
    if filters.actor:
        rows = rows.filter(actor_id=actor_id_of(filters.actor))
    if filters.since is not None or filters.until is not None:
        rows = within(rows, tenant_id=tenant_id, occurred_from=filters.since, occurred_to=filters.until)
    search = filters.search.strip()
    if search and _UUID.match(search):
        ident = uuid.UUID(search)
        rows = rows.filter(Q(id=ident) | Q(run_id=ident) | Q(conversation_id=ident) | Q(confirmation_id=ident)
                           | Q(business_result_id=str(ident)))
    elif search:
        rows = rows.filter(business_object=search)
    return rows.order_by("-chain_seq")


def trail_page(*, tenant_id: int, filters: TrailFilter, before: int | None = None,
               size: int = PAGE_SIZE) -> TrailPage:
    """One page of `trail_rows`, older than chain position `before` (None: the newest).

    size: rows per page, clipped to 1..MAX_PAGE_SIZE. Two short queries: the page (size + 1 rows,
    to know whether an older page exists) and the chain head.
    """
    size = max(1, min(size, MAX_PAGE_SIZE))
    rows = trail_rows(tenant_id=tenant_id, filters=filters).select_related("actor")
    if before is not None:
        rows = rows.filter(chain_seq__lt=before)
    batch = list(rows[:size + 1])
    more = len(batch) > size
    batch = batch[:size]
    head = AuditChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", flat=True).first() or 0
    next_before = batch[-1].chain_seq if more and batch and batch[-1].chain_seq is not None else None
    return TrailPage(rows=batch, next_before=next_before, head_seq=head, newer=before is not None)
