"""Values the code writes into a statement's text (core.sql.literals): they select exactly the
rows the bound value selects, on SQLite and PostgreSQL, and nothing but the code's own
identifiers, ints and aware datetimes gets in."""
from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from core import clock
from core.sql.literals import TimestampLiteral, identifier_sql, integer_literal


@pytest.fixture
def rows(people):
    tenant = people["acme"]["requester"].tenant
    base = clock.now().replace(microsecond=0) - datetime.timedelta(days=1)
    # microseconds 0 and not: SQLite stores the two in different text forms
    times = [base + datetime.timedelta(seconds=n, microseconds=500_000 * (n % 2)) for n in range(10)]
    AuditEvent.objects.bulk_create([AuditEvent(id=uuid.uuid4(), tenant=tenant, decision="EXECUTED", tool_name="lit",
                                               occurred_at=at, chain_seq=None) for at in times])
    return tenant, times


def _ids(queryset) -> list:
    return sorted(queryset.values_list("id", flat=True))


@pytest.mark.parametrize("k", [0, 1, 4, 9])
def test_a_timestamp_literal_selects_what_the_bound_value_selects(rows, k):
    tenant, times = rows
    mine = AuditEvent.objects.filter(tenant=tenant, tool_name="lit")
    at = times[k]
    for lookup in ("gte", "gt", "lt", "lte"):
        bound, literal = mine.filter(**{f"occurred_at__{lookup}": at}), mine.filter(**{f"occurred_at__{lookup}": TimestampLiteral(at)})
        assert _ids(literal) == _ids(bound), lookup
    # another zone, the same instant
    shanghai = at.astimezone(datetime.timezone(datetime.timedelta(hours=8)))
    assert _ids(mine.filter(occurred_at__gte=TimestampLiteral(shanghai))) == _ids(mine.filter(occurred_at__gte=at))


def test_a_literal_is_in_the_statement_text_not_among_its_parameters(rows):
    tenant, times = rows
    with CaptureQueriesContext(connection) as captured:
        list(AuditEvent.objects.filter(tenant=tenant, occurred_at__gte=TimestampLiteral(times[3]),
                                       chain_seq__gte=integer_literal(12345)))
    [sql] = [q["sql"] for q in captured.captured_queries]
    assert "12345" in sql and str(times[3].year) in sql


@pytest.mark.parametrize("value", [datetime.datetime(2026, 1, 1), "2026-01-01", None, 1.5, datetime.date(2026, 1, 1)])
def test_a_timestamp_literal_takes_only_an_aware_datetime(value):
    with pytest.raises(TypeError):
        TimestampLiteral(value)


@pytest.mark.parametrize("value", ["PENDING'; DROP TABLE x; --", "a b", "", "1abc", 5, None, "É"])
def test_an_identifier_literal_takes_only_the_codes_own_names(value):
    with pytest.raises(ValueError):
        identifier_sql(value)
    assert identifier_sql("PENDING") == "'PENDING'"


@pytest.mark.parametrize("value", [True, "1", 1.0, None])
def test_an_integer_literal_takes_only_an_int(value):
    with pytest.raises(TypeError):
        integer_literal(value)


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "0001-01-02T00:00:00Z",
                                   "9999-12-30T00:00:00Z", "2026-03-01T10:00:00.5+08:00"])
def test_the_audit_api_takes_a_range_at_the_ends_of_the_calendar(people, value):
    """A range bound anywhere on the calendar, in any zone, is an answer or a 400, never a server
    error; a range that holds the trail's rows lists them."""
    from django.contrib.auth.models import Permission
    from rest_framework.test import APIClient

    auditor = people["acme"]["approver1"]
    auditor.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    AuditEvent.objects.bulk_create([AuditEvent(id=uuid.uuid4(), tenant=auditor.tenant, decision="EXECUTED",
                                               tool_name="cal", chain_seq=10_000 + n, row_hash=f"{n:064d}")
                                    for n in range(3)])
    client = APIClient()
    client.force_authenticate(auditor)
    for name in ("from", "to"):
        response = client.get("/api/v1/audit-events/", {name: value, "tool": "cal"})
        assert response.status_code in (200, 400), (name, response.status_code, response.content[:300])
        if response.status_code == 200 and (name, value[:4]) in {("from", "0001"), ("to", "9999")}:
            assert len(response.json()["results"]) == 3, response.json()
