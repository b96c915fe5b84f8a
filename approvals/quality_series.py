"""Approver-gated requests of one tenant over time, per UTC day: waiting, approved, rejected and
expired (the overview's charts; docs/approvals.md, "Approval quality").

- waiting: requests open at the end of the day (for today: now), i.e. created before it and not
  yet approved, decided or past their deadline;
- approved: requests that reached their quorum that day (`confirmed_at`);
- rejected: requests an approver rejected that day;
- expired: requests whose deadline passed that day with nobody deciding (marked EXPIRED, or due
  and not swept yet).

Six aggregate statements whatever the number of requests: one count of what was waiting when the
window began, and one GROUP BY day for each of arrivals, departures, approvals, rejections and
expiries; the waiting line is their running sum over the window's days.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Count, F, Q, QuerySet
from django.db.models.functions import Coalesce, Least, TruncDate

from approvals.models import Approval, ConfirmationRequest
from approvals.quality_window import Window
from core import clock

UTC = datetime.timezone.utc
SERIES = ("waiting", "approved", "rejected", "expired")


@dataclass(frozen=True)
class Day:
    """One day's counts (see the module docstring)."""

    day: datetime.date
    waiting: int
    approved: int
    rejected: int
    expired: int


def _gated(tenant_id: int) -> QuerySet:
    return ConfirmationRequest.objects.filter(tenant_id=tenant_id, policy=ConfirmationRequest.Policy.APPROVERS)


def _left_at():
    """When a request stopped waiting: approved, else decided, else its deadline; never later than
    the deadline (a sweep or a supersession after the deadline does not extend the wait). A request
    sent back to waiting has neither and waits until its deadline."""
    return Least(Coalesce("confirmed_at", "decided_at", "expires_at"), F("expires_at"))


def _per_day(rows: QuerySet, field: str, *, distinct: str = "pk") -> dict[datetime.date, int]:
    grouped = rows.annotate(day=TruncDate(field, tzinfo=UTC)).values("day").annotate(
        n=Count(distinct, distinct=distinct != "pk")).order_by()
    return {row["day"]: row["n"] for row in grouped}


def daily_counts(*, tenant_id: int, window: Window, now: datetime.datetime | None = None) -> list[Day]:
    """One Day per date of `window`, oldest first, for tenant `tenant_id` (see the module docstring)."""
    now = now or clock.now()
    since, until = window.since, min(window.until, now)
    gated = _gated(tenant_id)
    with_left = gated.annotate(left_at=_left_at())
    waiting_at_start = with_left.filter(created_at__lt=since, left_at__gte=since).count()
    arrivals = _per_day(gated.filter(created_at__gte=since, created_at__lt=until), "created_at")
    departures = _per_day(with_left.filter(left_at__gte=since, left_at__lt=until), "left_at")
    approved = _per_day(gated.filter(confirmed_at__gte=since, confirmed_at__lt=until), "confirmed_at")
    rejected = _per_day(Approval.objects.filter(
        request__tenant_id=tenant_id, decision=Approval.Decision.REJECT,
        created_at__gte=since, created_at__lt=until), "created_at", distinct="request")
    expired = _per_day(gated.filter(Q(status=ConfirmationRequest.Status.EXPIRED)
                                    | Q(status=ConfirmationRequest.Status.PENDING, expires_at__lte=now),
                                    expires_at__gte=since, expires_at__lt=until), "expires_at")
    days, waiting = [], waiting_at_start
    for day in window.days:
        waiting += arrivals.get(day, 0) - departures.get(day, 0)
        days.append(Day(day=day, waiting=waiting, approved=approved.get(day, 0), rejected=rejected.get(day, 0),
                        expired=expired.get(day, 0)))
    return days
