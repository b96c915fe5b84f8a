"""Paginators whose count does not read a whole table (docs/performance.md, "Scale").

Django's Paginator counts every row of the list to number its pages: on a tenant's history that
COUNT costs more than the page itself, and grows with everything the tenant ever did.

`CappedCountPaginator` counts at most `cap` + 1 rows: the count is exact up to `cap`, and past it
the paginator says so (`count_capped`) instead of counting on; a page is read with one row more
than it shows, so "is there a next page" needs no count. `EstimatedCountPaginator` (the admin's)
replaces a capped count by the planner's estimate of the rows (PostgreSQL's EXPLAIN, no rows
read), so page links still reach the end; pages said to exist by neither are still served.
"""
from __future__ import annotations

import json

from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

COUNT_CAP = 1000  # rows a count may read: exact up to here, "more than" past it


class CappedPage(Page):
    """A page that knows whether a next one exists from the extra row it read (`has_more`)."""

    has_more: bool = False

    def has_next(self) -> bool:
        return self.has_more


def capped_count(queryset: QuerySet, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(rows of `queryset` up to `cap`, whether there are more): one COUNT over at most `cap` + 1
    ids, in no particular order."""
    counted = queryset.order_by().values("pk")[:cap + 1].count()
    return min(counted, cap), counted > cap


def estimated_count(queryset: QuerySet) -> int | None:
    """The planner's estimate of the rows `queryset` returns (PostgreSQL: EXPLAIN, which reads no
    rows; its accuracy is the table statistics', refreshed by autovacuum's ANALYZE), or None on
    another database or when the statement cannot be explained."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    try:
        return int(plan[0]["Plan"]["Plan Rows"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


class CappedCountPaginator(Paginator):
    """Django's Paginator over a QuerySet, counting at most `cap` + 1 rows.

    `count`: exact up to `cap`, else `cap` with `count_capped` True. Past the cap, any page number
    from 1 is served (empty past the last row) and `has_next` comes from one extra row read with
    the page; up to the cap it behaves exactly as Django's (EmptyPage past the last page).
    """

    cap = COUNT_CAP
    count_capped = False
    count_estimated = False

    @cached_property
    def count(self) -> int:
        counted, self.count_capped = capped_count(self.object_list, self.cap)
        return counted

    def validate_number(self, number) -> int:
        self.count  # noqa: B018 - counting first sets count_capped
        if self.count_capped:
            try:
                number = int(number)
            except (TypeError, ValueError):
                raise PageNotAnInteger(self.error_messages["invalid_page"]) from None
            if number < 1:
                raise EmptyPage(self.error_messages["min_page"])
            return number
        return super().validate_number(number)

    def page(self, number) -> CappedPage:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        rows = list(self.object_list[bottom:bottom + self.per_page + 1])
        page = CappedPage(rows[:self.per_page], number, self)
        page.has_more = len(rows) > self.per_page
        return page


class EstimatedCountPaginator(CappedCountPaginator):
    """CappedCountPaginator whose count past the cap is the planner's estimate (`count_estimated`
    True: show it as "about N"), so the page links reach the end of a long list. Without an
    estimate (not PostgreSQL), the capped count."""

    @cached_property
    def count(self) -> int:
        counted, self.count_capped = capped_count(self.object_list, self.cap)
        if not self.count_capped:
            return counted
        estimate = estimated_count(self.object_list)
        if estimate is None:
            return counted
        self.count_estimated = True
        return max(estimate, self.cap + 1)
