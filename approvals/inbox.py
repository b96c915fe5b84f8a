"""The approver's inbox: which requests a tab lists, narrowed by filters and a search, sorted, and
cut into pages without counting the whole table.

Tabs: "mine" (waiting for my decision: approvals.selectors.requests_decidable_by), "open" (every
open request of tools I approve, including ones I already approved or may not count on), "decided"
(approvals.selectors.requests_history_for). Every filter is a plain column condition on top of the
tab's tenant-scoped query (tenant, status, created_at and expires_at are indexed); the amount range
reads the call's `amount` argument, or the facts' refund amount for a full refund.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Case, DecimalField, F, Q, QuerySet, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from core import clock
from approvals import selectors
from approvals.models import Approval, ConfirmationRequest

TABS = ("mine", "open", "decided")
SORTS = ("newest", "expires")
RISKS = ("LOW", "MEDIUM", "HIGH", "CRITICAL")
PAGE_SIZE = 25
COUNT_CAP = 1000  # a tab's count stops here ("1000+"): a count never scans a whole tenant's history
SEARCH_MAX_CHARS = 100
NUMBER = r"^[0-9]{1,12}(\.[0-9]{1,6})?$"
PAGE_MAX = 100_000  # a page number past this reads as the last one asked for; OFFSET stays in range


@dataclass
class InboxQuery:
    """What the inbox was asked for, cleaned: tab, sort, filters (tool name, risk, requester
    username, amount bounds as Decimal or None), search text and page number (from 1)."""

    tab: str = "mine"
    sort: str = "newest"
    tool: str = ""
    risk: str = ""
    requester: str = ""
    amount_min: Decimal | None = None
    amount_max: Decimal | None = None
    q: str = ""
    page: int = 1
    errors: list[str] = field(default_factory=list)

    def filtered(self) -> bool:
        """Whether any filter or search narrows the list."""
        return bool(self.tool or self.risk or self.requester or self.q
                    or self.amount_min is not None or self.amount_max is not None)


def _amount(value: str, label: str, errors: list[str]) -> Decimal | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        amount = Decimal(value)
    except InvalidOperation:
        amount = None
    if amount is None or not amount.is_finite() or amount < 0:
        errors.append(f"{label} must be a number of at least 0. / {label}必须是不小于 0 的数字。")
        return None
    return amount


def parse(params: Any, *, default_tab: str = "mine") -> InboxQuery:
    """An InboxQuery from query parameters (a QueryDict or dict of str): unknown tabs, sorts and
    risks fall back to the defaults; a bad amount or page is reported in `errors` and ignored."""
    errors: list[str] = []

    def text(name: str, limit: int) -> str:  # NUL never reaches a query (PostgreSQL refuses it)
        return (params.get(name) or "").replace("\x00", "").strip()[:limit]

    tab = params.get("tab") or default_tab
    sort = params.get("sort") or "newest"
    risk = (params.get("risk") or "").upper()
    try:
        page = min(PAGE_MAX, max(1, int(params.get("page") or 1)))
    except ValueError:
        page = 1
    return InboxQuery(
        tab=tab if tab in TABS else default_tab, sort=sort if sort in SORTS else "newest",
        tool=text("tool", 100), risk=risk if risk in RISKS else "", requester=text("requester", 150),
        amount_min=_amount(params.get("amount_min"), "Minimum amount", errors),
        amount_max=_amount(params.get("amount_max"), "Maximum amount", errors),
        q=text("q", SEARCH_MAX_CHARS), page=page, errors=errors)


def open_for(*, user) -> QuerySet[ConfirmationRequest]:
    """Open approver-gated requests of the user's tenant on tools they approve (others' requests),
    or that they decided already: the "all open" tab."""
    if user.tenant_id is None or not user.is_active:
        return ConfirmationRequest.objects.none()
    mine = Approval.objects.filter(approver=user).values("request_id")
    return selectors.annotated(ConfirmationRequest.objects.open().filter(
        tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.APPROVERS).filter(
        (Q(tool__in=selectors.approvable_tools(user)) & ~Q(user_id=user.pk)) | Q(pk__in=mine)), user)


def tab_rows(*, user, tab: str) -> QuerySet[ConfirmationRequest]:
    """The unfiltered rows of `tab` for `user` (annotated like approvals.selectors.annotated)."""
    if tab == "open":
        return open_for(user=user)
    if tab == "decided":
        return selectors.requests_history_for(user=user)
    return selectors.requests_decidable_by(user=user)


def amount_expression():
    """The call's amount as a number: its `amount` argument, else its facts' refund amount; NULL
    when neither is a plain decimal number (checked before the cast, so odd values never fail)."""
    text = Coalesce(KT("arguments__amount"), KT("approval_context__facts__refund_amount__amount"))
    return Case(When(Q(_amount_text__regex=NUMBER), then=Cast(F("_amount_text"), DecimalField(max_digits=20,
                                                                                                decimal_places=6))),
                default=Value(None), output_field=DecimalField(max_digits=20, decimal_places=6)), text


def narrowed(qs: QuerySet[ConfirmationRequest], query: InboxQuery) -> QuerySet[ConfirmationRequest]:
    """`qs` narrowed by the query's filters and search, sorted (time left: soonest first; newest:
    latest first; the id breaks ties so pages never overlap)."""
    if query.tool:
        qs = qs.filter(tool_name=query.tool)
    if query.risk:
        qs = qs.filter(risk=query.risk)
    if query.requester:
        qs = qs.filter(user__username=query.requester)
    if query.amount_min is not None or query.amount_max is not None:
        number, text = amount_expression()
        qs = qs.annotate(_amount_text=text).annotate(_amount=number)
        if query.amount_min is not None:
            qs = qs.filter(_amount__gte=query.amount_min)
        if query.amount_max is not None:
            qs = qs.filter(_amount__lte=query.amount_max)
    if query.q:
        words = Q(summary__icontains=query.q) | Q(business_object__icontains=query.q) | Q(
            user__username__icontains=query.q) | Q(user__first_name__icontains=query.q) | Q(
            user__last_name__icontains=query.q) | Q(tool_name__icontains=query.q)
        qs = qs.filter(words)
    if query.sort == "expires":
        return qs.order_by("expires_at", "pk")
    return qs.order_by("-created_at", "-pk")


@dataclass
class Page:
    """One page of a tab: `rows` (at most PAGE_SIZE), `number` (from 1), `has_previous`,
    `has_next`, `count` (rows in the tab, at most COUNT_CAP) and `count_capped` (more exist)."""

    rows: list
    number: int
    has_previous: bool
    has_next: bool
    count: int
    count_capped: bool

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1


def capped_count(qs: QuerySet) -> tuple[int, bool]:
    """(rows in `qs` up to COUNT_CAP, whether there are more): reads at most COUNT_CAP + 1 ids."""
    n = qs.order_by().values("pk")[:COUNT_CAP + 1].count()
    return min(n, COUNT_CAP), n > COUNT_CAP


def page_of(qs: QuerySet[ConfirmationRequest], number: int, *, size: int | None = None) -> Page:
    """Page `number` of `qs` (`size` rows, default PAGE_SIZE; LIMIT/OFFSET, one row more than
    shown to know whether a next page exists) with the requester and any claim read in the same
    query."""
    size = size or PAGE_SIZE
    start = (number - 1) * size
    rows = list(qs.select_related("user", "tool", "claim__user")[start:start + size + 1])
    count, capped = capped_count(qs)
    return Page(rows=rows[:size], number=number, has_previous=number > 1, has_next=len(rows) > size,
                count=count, count_capped=capped)


def live_claim(row: ConfirmationRequest):
    """The claim on `row` that counts now (its `claim` read with the row): None when there is none,
    it is past `expires_at`, or the request is no longer open."""
    now = clock.now()
    try:
        claim = row.claim
    except ConfirmationRequest.claim.RelatedObjectDoesNotExist:
        return None
    if claim is None or claim.expires_at <= now or not row.is_open_at(now):
        return None
    return claim
