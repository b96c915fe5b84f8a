"""The navigation's count of requests an approver may decide now (`count_decidable_by`, the menu
badge) counts exactly what their "waiting for me" tab lists (`requests_decidable_by`): an
approver whose decision was on an earlier revision may decide the edited one again, so it counts
for them again, on the badge as on the tab; a decision on the current revision takes it off both.
"""
from __future__ import annotations

from agentplatform.runtime import services
from approvals.models import ConfirmationRequest
from approvals.selectors import count_decidable_by, requests_decidable_by
from tests.api.conftest import api  # noqa: F401 - fixture

ORDER = "A202607290007"  # acme, PAID, CNY 76.00


def _tab(user) -> set:
    return set(requests_decidable_by(user=user).values_list("pk", flat=True))


def test_the_badge_counts_what_the_tab_lists_across_an_edit(api, requester, approver1, approver2):
    outcome = services.chat_send(user=requester, message=f"Refund order {ORDER} amount 10 because it arrived damaged")
    request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
    assert request.quorum == 2
    assert _tab(approver1) == {request.pk} and count_decidable_by(user=approver1) == 1

    # approver1 approves revision 0: off their tab and their badge
    assert api(approver1).post(f"/api/v1/approvals/{request.pk}/approve/", {}, format="json").status_code == 200
    assert _tab(approver1) == set() and count_decidable_by(user=approver1) == 0

    # approver2 edits the amount down: revision 1, whose quorum starts again with approver2's edit
    response = api(approver2).post(f"/api/v1/approvals/{request.pk}/edit/", {
        "arguments": {**request.arguments, "amount": "8"}, "base_arguments_hash": request.arguments_hash},
        format="json")
    assert response.status_code == 200, response.json()
    assert ConfirmationRequest.objects.get(pk=request.pk).revision == 1

    # approver1 may decide the new revision: on their tab and on their badge again; not approver2's
    assert _tab(approver1) == {request.pk} and count_decidable_by(user=approver1) == 1
    assert _tab(approver2) == set() and count_decidable_by(user=approver2) == 0


def test_the_inbox_shows_the_badge_its_rules_count_on_every_tab(client, requester, approver1, approver2, api):
    """The unfiltered "waiting for me" tab hands its own count to the badge (one count less per
    view); filtered or on another tab, the badge is counted by its own statement. Either way it
    says how many the approver may decide now, an edited request they may decide again included."""
    import re

    from django.test.utils import CaptureQueriesContext
    from django.db import connection

    for n in range(3):
        services.chat_send(user=requester, message=f"Refund order {ORDER} amount {n + 1} because it arrived damaged")
    first = ConfirmationRequest.objects.filter(user=requester, status="PENDING").order_by("created_at").first()
    assert api(approver1).post(f"/api/v1/approvals/{first.pk}/approve/", {}, format="json").status_code == 200
    assert api(approver2).post(f"/api/v1/approvals/{first.pk}/edit/", {
        "arguments": {**first.arguments, "amount": "0.50"}, "base_arguments_hash": first.arguments_hash},
        format="json").status_code == 200
    expected = count_decidable_by(user=approver1)
    assert expected == len(_tab(approver1)) >= 1

    client.force_login(approver1)
    for path in ("/approvals/", "/approvals/?tab=open", "/approvals/?tab=mine&risk=CRITICAL", "/approvals/history/"):
        with CaptureQueriesContext(connection) as captured:
            page = client.get(path)
        assert page.status_code == 200, path
        badge = re.search(r'data-testid="nav-approvals-count"[^>]*>(\d+)<', page.content.decode())
        assert badge and int(badge.group(1)) == expected, (path, badge and badge.group(1))
        counts = [q["sql"] for q in captured.captured_queries
                  if q["sql"].lstrip().startswith("SELECT COUNT(*)") and '"approvals_confirmationrequest"' in q["sql"]]
        assert len(counts) == (1 if path == "/approvals/" else 2), (path, counts)
