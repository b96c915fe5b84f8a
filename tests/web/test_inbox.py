"""The approver's inbox through Django's test client: tabs, filters, search, sort and paging
without a query per line; the pane records an opening and claims; the claim API; the auditor's
read-only request page."""
from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from agentplatform.runtime import services
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import AUDITOR_PERMISSION
from approvals import approver_actions, inbox
from approvals.models import ConfirmationRequest, RequestClaim, RequestView
from core import clock


def _refund(requester, order: str, amount: int) -> ConfirmationRequest:
    outcome = services.chat_send(user=requester, message=f"Refund {order} amount {amount} because it arrived broken")
    assert outcome.pending and outcome.pending[0].needs == "approvers"
    return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)


@pytest.fixture
def three(requester):
    """Three refunds waiting for approvers, oldest first: CNY 20, 50 and 30."""
    return [_refund(requester, "A202607290001", 20), _refund(requester, "A202607290003", 50),
            _refund(requester, "A202607290005", 30)]


def _ids(response) -> list:
    return [r.pk for r in response.context["rows"]]


@pytest.mark.django_db
def test_filters_search_and_sort_narrow_the_list(client, approver1, three):
    small, big, middle = three
    client.force_login(approver1)
    url = reverse("approvals:pending")
    assert _ids(client.get(url)) == [middle.pk, big.pk, small.pk]  # newest first
    assert _ids(client.get(url, {"amount_min": "25", "amount_max": "40"})) == [middle.pk]
    assert _ids(client.get(url, {"amount_min": "25"})) == [middle.pk, big.pk]
    assert _ids(client.get(url, {"q": "A202607290003"})) == [big.pk]
    assert _ids(client.get(url, {"requester": "acme-requester", "tool": "refund_order"})) == [middle.pk, big.pk,
                                                                                               small.pk]
    assert _ids(client.get(url, {"requester": "someone-else"})) == []
    assert _ids(client.get(url, {"risk": "LOW"})) == []
    ConfirmationRequest.objects.filter(pk=small.pk).update(expires_at=clock.now() + datetime.timedelta(minutes=2))
    assert _ids(client.get(url, {"sort": "expires"}))[0] == small.pk  # the least time left first
    bad = client.get(url, {"amount_min": "lots"})
    assert bad.status_code == 200 and "Minimum amount must be a number" in bad.content.decode()
    assert len(_ids(bad)) == 3  # a bad bound is reported and ignored


@pytest.mark.django_db
def test_tabs_split_mine_all_open_and_decided(client, approver1, approver2, three):
    small, big, middle = three
    approver_actions.confirmation_approve(request_id=big.pk, approver=approver1)
    approver_actions.confirmation_reject(request_id=small.pk, approver=approver2, reason="no")
    client.force_login(approver1)
    assert _ids(client.get(reverse("approvals:pending"))) == [middle.pk]
    assert _ids(client.get(reverse("approvals:pending"), {"tab": "open"})) == [middle.pk, big.pk]
    decided = client.get(reverse("approvals:history"))
    assert _ids(decided) == [big.pk, small.pk]  # I approved it (still waiting for others), rejected by another
    assert {r.pk: r.display_status for r in decided.context["rows"]}[small.pk] == "REJECTED"


@pytest.mark.django_db
def test_pages_are_cut_without_counting_everything_or_a_query_per_line(client, approver1, three, monkeypatch,
                                                                       django_assert_max_num_queries):
    monkeypatch.setattr(inbox, "PAGE_SIZE", 2)
    monkeypatch.setattr(inbox, "COUNT_CAP", 2)
    client.force_login(approver1)
    first = client.get(reverse("approvals:pending"), {"tab": "open", "page": "1"})
    second = client.get(reverse("approvals:pending"), {"tab": "open", "page": "2"})
    assert len(_ids(first)) == 2 and len(_ids(second)) == 1 and not set(_ids(first)) & set(_ids(second))
    assert first.context["page"].has_next and not second.context["page"].has_next
    assert first.context["page"].count == 2 and first.context["page"].count_capped
    assert "More than 2 requests" in first.content.decode() and "page=2" in first.content.decode()
    # The list costs the same with one line or many: no query per line (the pane aside).
    monkeypatch.setattr(inbox, "PAGE_SIZE", 25)
    with django_assert_max_num_queries(40) as captured:
        client.get(reverse("approvals:pending"), {"tab": "open", "rows_only": "1"})
    few = len(captured.captured_queries)
    for order in ("A202607290002", "A202607290004"):
        _refund(User.objects.get(username="acme-requester"), order, 10)
    with django_assert_max_num_queries(few) as captured:
        client.get(reverse("approvals:pending"), {"tab": "open", "rows_only": "1"})


@pytest.mark.django_db
def test_opening_a_request_records_the_view_and_claims_it(client, approver1, approver2, three):
    small, big, middle = three
    client.force_login(approver1)
    page = client.get(reverse("approvals:pending"), {"open": str(big.pk)})
    assert page.context["pane"].pk == big.pk and page.context["pane"].decidable
    assert RequestView.objects.filter(request=big, user=approver1).count() == 1
    assert RequestClaim.objects.get(request=big).user_id == approver1.pk
    # the live poll's copy of the list opens nothing
    client.get(reverse("approvals:pending"), {"rows_only": "1"})
    assert RequestView.objects.count() == 1 and RequestClaim.objects.count() == 1

    # another approver lands: the pane opens the first request nobody else is looking at
    client.force_login(approver2)
    page = client.get(reverse("approvals:pending"))
    assert page.context["pane"].pk == middle.pk
    client.get(reverse("approvals:pending"), {"open": str(big.pk)})
    html = client.get(reverse("approvals:detail", args=[big.pk])).content.decode()
    assert "Being reviewed by acme-approver1" in html and 'data-testid="approve"' in html
    assert RequestClaim.objects.get(request=big).user_id == approver1.pk
    assert RequestView.objects.filter(request=big, user=approver2).count() == 2
    live = client.get(reverse("approvals:live")).json()["pending"]
    assert {item["id"]: item["claimed_by"] for item in live}[str(big.pk)] == "acme-approver1"

    # deciding releases the decider's claim; the request page of another tenant is 404
    client.force_login(approver1)
    client.post(reverse("approvals:reject", args=[big.pk]), {"reason": "duplicate"})
    assert not RequestClaim.objects.filter(request=big).exists()


@pytest.mark.django_db
def test_the_claim_api_is_tenant_scoped_and_for_deciders_only(client, approver1, approver2, requester,
                                                              outsider_approver, three):
    small, big, middle = three
    url = f"/api/v1/approvals/{big.pk}/claim/"
    client.force_login(approver1)
    taken = client.post(url)
    assert taken.status_code == 200 and taken.json()["claimed_by"] == "acme-approver1" and taken.json()["mine"]
    client.force_login(approver2)
    seen = client.post(url).json()
    assert seen["claimed_by"] == "acme-approver1" and seen["mine"] is False
    assert client.delete(url).json()["claimed_by"] == "acme-approver1"  # not theirs to release
    listed = {r["id"]: r["claimed_by"] for r in client.get("/api/v1/approvals/").json()["results"]}
    assert listed == {str(big.pk): "acme-approver1", str(small.pk): None, str(middle.pk): None}
    for user in (outsider_approver, requester):
        client.force_login(user)
        response = client.post(url)
        assert response.status_code == 404 and response.json()["code"] == "CONFIRMATION_INVALID"
    client.force_login(approver1)
    assert client.post(f"/api/v1/approvals/{big.pk}/release/").json()["claimed_by"] is None
    approver_actions.confirmation_approve(request_id=big.pk, approver=approver1)
    response = client.post(url)
    assert response.status_code == 403 and response.json()["code"] == "APPROVAL_FORBIDDEN"
    approver_actions.confirmation_reject(request_id=small.pk, approver=approver2, reason="no")
    response = client.post(f"/api/v1/approvals/{small.pk}/claim/")
    assert response.status_code == 409 and response.json()["code"] == "CONFIRMATION_NOT_OPEN"
    assert not RequestClaim.objects.exists()


def _auditor(username: str, tenant) -> User:
    user = User.objects.create_user(username=username, password="x", tenant=tenant)
    app_label, codename = AUDITOR_PERMISSION.split(".")
    user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return User.objects.get(pk=user.pk)


@pytest.mark.django_db
def test_an_auditor_reads_a_request_page_without_forms_or_claim(client, approver1, outsider_approver, nobody, three):
    small, big, middle = three
    client.force_login(_auditor("acme-auditor-x", approver1.tenant))
    page = client.get(reverse("approvals:detail", args=[big.pk]))
    html = page.content.decode()
    assert page.status_code == 200 and big.summary in html and 'data-fact="order_id"' in html
    assert 'data-testid="approve"' not in html and 'data-testid="claim-button"' not in html
    assert 'data-testid="read-only"' in html
    assert not RequestClaim.objects.exists() and not RequestView.objects.exists()
    client.force_login(_auditor("globex-auditor-x", outsider_approver.tenant))  # another tenant's auditor
    assert client.get(reverse("approvals:detail", args=[big.pk])).status_code == 404
    client.force_login(nobody)  # neither approver nor auditor
    assert client.get(reverse("approvals:detail", args=[big.pk])).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("params", [{"page": "9" * 30}, {"q": "A2026\x00"}, {"tool": "refund_order\x00"},
                                    {"requester": "acme-requester\x00"}])
def test_odd_query_values_never_break_the_inbox(client, approver1, three, params):
    """A page number past any database's OFFSET and a NUL in a text filter (PostgreSQL refuses NUL
    in text) read as plain input: the inbox answers, never a server error."""
    client.force_login(approver1)
    for name in ("approvals:pending", "approvals:history"):
        response = client.get(reverse(name), params)
        assert response.status_code == 200
    if "page" not in params:
        assert len(_ids(client.get(reverse("approvals:pending"), params))) == 3  # NUL dropped, filter kept
