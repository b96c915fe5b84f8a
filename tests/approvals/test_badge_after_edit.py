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
