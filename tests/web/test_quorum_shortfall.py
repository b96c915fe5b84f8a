"""A pending request whose quorum can no longer be reached says so:
the requester's page and the API showed "PENDING 1 / 2" until the request expired, although nobody
else could decide it."""
from __future__ import annotations

import pytest
from django.urls import reverse

from approvals import approver_actions
from approvals.models import ConfirmationRequest
from approvals.eligibility import quorum_shortfall
from tests.api.conftest import api  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def test_a_reachable_quorum_has_no_shortfall(refund_request):
    assert quorum_shortfall(refund_request) == 0


def test_the_requester_is_told_when_too_few_approvers_remain(client, api, requester, approver1, approver2,
                                                            refund_request):
    # given: approver1 approved (1 of 2) and approver2, the only other approver, left
    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver1)
    approver2.is_active = False
    approver2.save(update_fields=["is_active"])
    request = ConfirmationRequest.objects.get(pk=refund_request.pk)

    assert quorum_shortfall(request) == 1
    client.force_login(requester)
    page = client.get(reverse("approvals:mine")).content.decode()
    assert 'data-testid="quorum-unreachable"' in page and "cannot be reached" in page
    [row] = [r for r in api(requester).get("/api/v1/my-requests/").json()["results"] if r["id"] == str(request.pk)]
    assert row["quorum_shortfall"] == 1 and row["can_withdraw"] is True


def test_a_request_that_reached_its_quorum_has_no_shortfall(approver1, approver2, refund_request):
    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver1)
    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver2)  # quorum reached: runs

    request = ConfirmationRequest.objects.get(pk=refund_request.pk)
    assert request.status != ConfirmationRequest.Status.PENDING and quorum_shortfall(request) == 0
