"""Cursor pagination never loses or repeats rows: every cursor-paginated list
orders on a unique key; 23 audit events sharing one occurred_at page forward and back whole."""
from __future__ import annotations

import datetime

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import get_resolver
from rest_framework.pagination import CursorPagination

from agentplatform.api.pagination import UniqueKeyCursorPagination
from audit import events
from audit.models import AuditEvent
from tests.api.test_audit import auditor


def _api_views():
    def walk(patterns):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from walk(p.url_patterns)
            else:
                view = getattr(p.callback, "view_class", None) or getattr(p.callback, "cls", None)
                if view is not None:
                    yield view
    return list(walk(get_resolver().url_patterns))


def test_every_cursor_paginated_list_orders_on_a_unique_key():
    cursor_views = [v for v in _api_views()
                    if isinstance(getattr(v, "pagination_class", None), type)
                    and issubclass(v.pagination_class, CursorPagination)]
    assert cursor_views, "the audit list at least is cursor-paginated"
    for view in cursor_views:
        assert issubclass(view.pagination_class, UniqueKeyCursorPagination), view
        model = getattr(getattr(view, "queryset", None), "model", None) or AuditEvent
        view.pagination_class.check_unique(model)


def test_an_ordering_on_a_shared_value_is_refused():
    class Bad(UniqueKeyCursorPagination):
        ordering = ("-occurred_at", "-id")

    class AlsoBad(UniqueKeyCursorPagination):
        ordering = ("-occurred_at",)

    for paginator in (Bad, AlsoBad):
        with pytest.raises(ImproperlyConfigured):
            paginator.check_unique(AuditEvent)


def _pages(client, url: str, direction: str) -> list[list[str]]:
    pages = []
    while url:
        page = client.get(url).json()
        pages.append([r["message"] for r in page["results"]])
        url = page[direction]
    return pages


def test_23_events_sharing_one_occurred_at_page_forward_and_back_without_loss(api, approver1, requester, monkeypatch):
    # given: 23 events written at the same instant, and the other tenant's rows in between
    client = api(auditor(approver1))  # (issuing its API key is audited too: before the frozen instant)
    instant = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(events.timezone, "now", lambda: instant)
    for i in range(23):
        events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="EXECUTED",
                                 message=f"r{i:02d}")
    url = f"/api/v1/audit-events/?to={(instant + datetime.timedelta(seconds=1)).isoformat().replace('+00:00', 'Z')}" \
          f"&from={instant.isoformat().replace('+00:00', 'Z')}&page_size=5"

    # when: forward to the last page, then back along `previous`
    forward = _pages(client, url, "next")
    last_page = client.get(url).json()
    while last_page["next"]:
        last_page = client.get(last_page["next"]).json()
    backward = _pages(client, last_page["previous"], "previous")

    # then
    newest_first = [f"r{i:02d}" for i in reversed(range(23))]
    assert [m for page in forward for m in page] == newest_first
    assert [len(p) for p in forward] == [5, 5, 5, 5, 3]
    assert [m for page in reversed(backward) for m in page] == newest_first[:20]
