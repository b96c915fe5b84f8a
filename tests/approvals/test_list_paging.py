"""The lists page through everything without counting a whole history (core.paging): the pending
tab's second page shows the rest, My requests and the API say "more than" past the cap and still
reach every row, and nothing is lost or repeated between pages. On SQLite and PostgreSQL."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agentplatform.api.pagination import CappedCountPagePagination
from approvals import inbox, selectors
from core import paging
from tests.api.conftest import api  # noqa: F401 - fixture
from tests.approvals.list_support import history_build


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_pending_tab_pages_and_loses_nothing_between_pages(db, approver1, approver2, requester):
    history_build(requester=requester, approvers=[approver1, approver2], decided=4, waiting=30, start=0)
    client = _client(approver1)
    first = client.get(reverse("approvals:pending"))
    second = client.get(reverse("approvals:pending"), {"page": "2"})
    first_ids = [r.pk for r in first.context["rows"]]
    second_ids = [r.pk for r in second.context["rows"]]
    assert len(first_ids) == inbox.PAGE_SIZE and len(second_ids) == 30 - inbox.PAGE_SIZE
    assert not set(first_ids) & set(second_ids)
    waiting = set(selectors.requests_decidable_by(user=approver1).values_list("pk", flat=True))
    assert set(first_ids) | set(second_ids) == waiting and len(waiting) == 30
    assert first.context["page"].has_next and not second.context["page"].has_next
    assert "page=2" in first.content.decode()


def test_my_requests_say_more_than_past_the_cap_and_reach_every_row(db, approver1, approver2, requester,
                                                                     monkeypatch):
    from approvals import views

    history_build(requester=requester, approvers=[approver1, approver2], decided=5, waiting=2, start=0)
    monkeypatch.setattr(paging.CappedCountPaginator, "cap", 3)
    monkeypatch.setattr(views, "HISTORY_PAGE_SIZE", 2)
    client = _client(requester)
    seen, number = [], 1
    while True:
        page = client.get(reverse("approvals:mine"), {"page": str(number)})
        assert page.status_code == 200
        seen += [r.pk for r in page.context["rows"]]
        if not page.context["page"].has_next():
            break
        number += 1
    assert "Page 1 of more than 2" in client.get(reverse("approvals:mine")).content.decode()
    assert number == 4 and len(seen) == len(set(seen)) == 7  # 2 + 2 + 2 + 1, none lost or repeated


def test_the_api_counts_up_to_the_cap_and_pages_to_the_end(db, approver1, approver2, requester, api,
                                                           monkeypatch):
    history_build(requester=requester, approvers=[approver1, approver2], decided=8, waiting=0, start=0)
    monkeypatch.setattr(CappedCountPagePagination, "count_cap", 3)
    client = api(approver1)
    first = client.get("/api/v1/approvals/", {"status": "history", "page_size": "4"}).json()
    assert first["count"] == 3 and first["count_capped"] is True and first["previous"] is None
    second = client.get(first["next"]).json()
    assert second["next"] is None and second["previous"] is not None
    ids = [r["id"] for r in first["results"] + second["results"]]
    assert len(ids) == len(set(ids)) == 8
    past = client.get("/api/v1/approvals/", {"status": "history", "page_size": "4", "page": "3"})
    assert past.status_code == 404 and past.json()["code"] == "NOT_FOUND"
    # Under the cap the count is exact, as before.
    mine = api(requester).get("/api/v1/my-requests/", {"state": "history"}).json()
    assert mine["count"] == 3 and mine["count_capped"] is True
    monkeypatch.setattr(CappedCountPagePagination, "count_cap", 1000)
    mine = api(requester).get("/api/v1/my-requests/", {"state": "history"}).json()
    assert mine["count"] == 8 and mine["count_capped"] is False


@pytest.mark.parametrize(("path", "narrowed", "expected"), [
    ("/admin/approvals/confirmationrequest/", "?risk=CRITICAL&tool_name=refund_order&status=CONSUMED", 4),
    ("/admin/approvals/approval/", "?decision=REJECT", 1),
])
def test_the_admin_changelists_filter_and_count_without_scanning(db, approver1, approver2, requester, acme_admin,
                                                                  path, narrowed, expected):
    history_build(requester=requester, approvers=[approver1, approver2], decided=6, waiting=0, start=0)
    client = _client(acme_admin)
    page = client.get(path)
    assert page.status_code == 200 and not page.context["cl"].paginator.count_capped
    filtered = client.get(path + narrowed)
    assert filtered.status_code == 200 and filtered.context["cl"].result_count == expected
    assert client.get(path + "?created_at__gte=2000-01-01").context["cl"].result_count == page.context[
        "cl"].result_count
