"""Finding the work, through Django's test client: approvers land on /approvals/, the navigation
counts what they may decide, the dashboard's poll says what changed, a notification's link opens
the request."""
from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core import clock
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals import approver_actions
from approvals.models import ConfirmationRequest

pytestmark = pytest.mark.django_db


def _sign_in(client, user, next_path: str = ""):
    data = {"username": user.username, "password": DEMO_PASSWORD}
    if next_path:
        data["next"] = next_path
    return client.post(reverse("login"), data)


def test_approvers_land_on_the_dashboard_and_others_on_the_chat(client, approver1, requester, acme_admin):
    assert _sign_in(client, approver1)["Location"] == "/approvals/"
    assert client.get("/")["Location"] == "/approvals/"
    client.logout()
    assert _sign_in(client, requester)["Location"] == "/chat/"
    assert client.get("/")["Location"] == "/chat/"
    client.logout()
    assert _sign_in(client, acme_admin)["Location"] == "/admin/"  # administers, does not approve
    client.logout()
    assert _sign_in(client, approver1, next_path="/chat/")["Location"] == "/chat/"  # an explicit next wins


def test_the_navigation_counts_what_the_approver_may_decide(client, approver1, approver2, requester, refund_request):
    client.force_login(approver1)
    html = client.get(reverse("chat")).content.decode()
    assert 'data-testid="nav-approvals-count"' in html
    assert 'title="1 waiting for your decision' in html
    assert "js/approvals-live.js" in html

    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver1)
    html = client.get(reverse("chat")).content.decode()
    assert 'nav-count is-zero' in html  # decided by me: no longer waiting for me

    client.force_login(requester)  # may not approve: no count, no poll
    html = client.get(reverse("chat")).content.decode()
    assert 'nav-approvals-count' not in html and "approvals-live.js" not in html


def test_the_navigation_costs_one_exists_and_one_count(client, approver1, requester, refund_request):
    client.force_login(approver1)
    with CaptureQueriesContext(connection) as captured:
        client.get(reverse("chat"))
    nav = [q["sql"] for q in captured.captured_queries if "approvals_confirmationrequest" in q["sql"]
           and "COUNT" in q["sql"].upper()]
    assert len(nav) == 1

    client.force_login(requester)
    with CaptureQueriesContext(connection) as captured:
        client.get(reverse("chat"))
    assert not [q for q in captured.captured_queries if "approvals_confirmationrequest" in q["sql"]
                and "COUNT" in q["sql"].upper()]


def test_the_poll_reports_pending_requests_and_their_quorum(client, approver1, approver2, refund_request):
    client.force_login(approver1)
    live = reverse("approvals:live")

    data = client.get(live).json()
    assert data["pending_count"] == 1 and data["poll_seconds"] >= 1
    assert data["pending"] == [{"id": str(refund_request.pk), "approvals": 0, "quorum": 2,
                                "expires_at": refund_request.expires_at.isoformat(),
                                "claimed_by": None, "claimed_by_me": False}]

    # another approver approves: the quorum moves
    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver2)
    assert client.get(live, {"ids": str(refund_request.pk)}).json()["pending"][0]["approvals"] == 1

    # still waiting for me: not ended; a malformed id is ignored
    data = client.get(live, {"ids": f"{refund_request.pk},not-a-uuid"}).json()
    assert data["ended"] == [] and data["pending_count"] == 1
    assert client.get(live, {"count": "1"}).json() == {"pending_count": 1, "pending": [], "ended": [],
                                                       "poll_seconds": data["poll_seconds"]}


def test_the_poll_reports_a_rejection_by_another_approver(client, approver1, approver2, refund_request):
    client.force_login(approver1)
    approver_actions.confirmation_reject(request_id=refund_request.pk, approver=approver2, reason="not covered")
    data = client.get(reverse("approvals:live"), {"ids": str(refund_request.pk)}).json()
    assert data["pending_count"] == 0 and data["pending"] == []
    assert data["ended"] == [{"id": str(refund_request.pk), "outcome": "REJECTED", "label": "REJECTED",
                              "decided_by": "acme-approver2", "decided_by_me": False}]


def test_the_poll_reports_an_expiry(client, approver1, refund_request):
    client.force_login(approver1)
    ConfirmationRequest.objects.filter(pk=refund_request.pk).update(
        expires_at=clock.now() - datetime.timedelta(seconds=1))
    data = client.get(reverse("approvals:live"), {"ids": str(refund_request.pk)}).json()
    assert data["ended"][0]["outcome"] == "EXPIRED"
    # settle-on-read marked it EXPIRED on the way
    assert ConfirmationRequest.objects.get(pk=refund_request.pk).status == ConfirmationRequest.Status.EXPIRED


def test_the_poll_says_nothing_about_another_tenant(client, outsider_approver, refund_request):
    client.force_login(outsider_approver)
    data = client.get(reverse("approvals:live"), {"ids": str(refund_request.pk)}).json()
    assert data == {"pending_count": 0, "pending": [], "ended": [], "poll_seconds": data["poll_seconds"]}


def test_a_notification_link_opens_the_request(client, approver1, approver2, outsider_approver, requester,
                                               refund_request):
    url = reverse("approvals:detail", args=[refund_request.pk])
    assert url == f"/approvals/{refund_request.pk}/"
    client.force_login(approver1)
    page = client.get(url)
    assert page.status_code == 200
    assert page.context["pane"].pk == refund_request.pk and page.context["pane"].decidable
    assert 'data-testid="approve"' in page.content.decode()

    approver_actions.confirmation_reject(request_id=refund_request.pk, approver=approver2, reason="not covered")
    page = client.get(url)
    assert page.status_code == 200 and not page.context["pane"].decidable
    assert page.context["pane"].outcome["outcome"] == "REJECTED"
    assert 'data-testid="approve"' not in page.content.decode()

    client.force_login(outsider_approver)  # another tenant
    assert client.get(url).status_code == 404
    client.force_login(requester)  # the requester, who may not approve it, is led to their own page of it
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:mine-detail", kwargs={"request_id": refund_request.pk})
