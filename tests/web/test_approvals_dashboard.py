"""The approver dashboard (/approvals/) through Django's test client: who sees what, decisions,
stale pages, other tenants and the history tab."""
from __future__ import annotations

import datetime

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from core import clock
from approvals import approver_actions
from audit.models import AuditEvent
from approvals.models import Approval, ConfirmationRequest
from tools.catalog.models import Refund

Status = ConfirmationRequest.Status


def _page(client, user, name="approvals:pending"):
    client.force_login(user)
    return client.get(reverse(name))


def _messages(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def _approve_url(request: ConfirmationRequest) -> str:
    return reverse("approvals:approve", args=[request.pk])


def _reject_url(request: ConfirmationRequest) -> str:
    return reverse("approvals:reject", args=[request.pk])


def test_anonymous_people_are_sent_to_sign_in(client, refund_request):
    response = client.get(reverse("approvals:pending"))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    response = client.post(_approve_url(refund_request))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not Approval.objects.exists()


def test_pending_tab_shows_what_an_approver_must_check(client, approver1, refund_request):
    response = _page(client, approver1)

    assert response.status_code == 200
    rows = response.context["rows"]
    assert [r.pk for r in rows] == [refund_request.pk]
    html = response.content.decode()
    assert refund_request.summary in html
    assert "acme-requester" in html                      # requester
    assert "CRITICAL" in html                            # risk badge
    assert "0 / 2" in html                               # approvals so far out of quorum
    assert "<th>amount</th><td><code>50.00</code></td>" in html  # the normalised arguments (minor unit)
    assert "user: Refund A202607290003" in html          # the conversation excerpt
    assert f'data-expires-at="{refund_request.expires_at.isoformat()}"' in html  # countdown


def test_requester_and_people_without_approve_tool_do_not_see_it(client, requester, nobody, refund_request):
    assert _page(client, requester).context["rows"] == []  # never their own request
    assert _page(client, nobody).context["rows"] == []     # no approve_tool on refund_order


def test_requester_confirmed_calls_are_not_on_the_dashboard(client, approver1, cancel_request):
    assert _page(client, approver1).context["rows"] == []

    response = client.post(_approve_url(cancel_request), {"comment": "sure"})

    assert response.status_code == 302
    assert any("may not decide" in text for _, text in _messages(response))
    assert not Approval.objects.exists()
    cancel_request.refresh_from_db()
    assert cancel_request.status == Status.PENDING


def test_two_approvals_reach_quorum_and_the_refund_runs_once(client, approver1, approver2, refund_request,
                                                             django_capture_on_commit_callbacks):
    client.force_login(approver1)
    response = client.post(_approve_url(refund_request), {"comment": "photo of the damage checked"})
    assert response.status_code == 302 and response["Location"] == reverse("approvals:pending")
    assert any("1/2" in text for level, text in _messages(response) if level == "success")
    refund_request.refresh_from_db()
    assert refund_request.status == Status.PENDING and not Refund.objects.exists()
    # decided by approver1: gone from their pending tab, in their history as still pending
    assert _page(client, approver1).context["rows"] == []
    history = _page(client, approver1, "approvals:history").context["rows"]
    assert [(r.pk, r.display_status, r.my_decision.comment) for r in history] == [
        (refund_request.pk, "PENDING", "photo of the damage checked")]

    client.force_login(approver2)
    assert "1 / 2" in _page(client, approver2).content.decode()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:  # the resume enqueued on commit
        response = client.post(_approve_url(refund_request), {"comment": ""})

    # the resume, the requester's notification and the retraction to approvers who were asked and
    # did not decide (docs/notifications.md); the run's steps each add their own commit marker
    # (agentplatform.runtime.step.Step), and each decision its count in the approval quality
    # metrics (approvals.quality_metrics), not counted here
    from agentplatform.runtime.step import Step
    from approvals.quality_metrics import observe

    assert len([c for c in callbacks if getattr(c, "__func__", None) is not Step._mark_committed
                and getattr(c, "func", None) is not observe]) == 3
    assert any("quorum reached" in text for _, text in _messages(response))
    refund_request.refresh_from_db()
    assert refund_request.status == Status.CONSUMED        # eager resume executed it
    assert Refund.objects.filter(order__order_id="A202607290003").count() == 1
    history = _page(client, approver2, "approvals:history").context["rows"]
    assert [(r.pk, r.display_status, r.approvals_count) for r in history] == [(refund_request.pk, "EXECUTED", 2)]


def test_stale_page_cannot_approve_what_someone_else_rejected(client, approver1, approver2, refund_request):
    # given: approver1 has the page open with the request on it
    assert [r.pk for r in _page(client, approver1).context["rows"]] == [refund_request.pk]
    # when: approver2 rejects meanwhile, then approver1 clicks Approve on the stale page
    approver_actions.confirmation_reject(request_id=refund_request.pk, approver=approver2, reason="duplicate refund")
    response = client.post(_approve_url(refund_request), {"comment": "ok"})
    # then
    assert response.status_code == 302
    assert [level for level, _ in _messages(response)] == ["error"]
    assert "already decided" in _messages(response)[0][1]
    assert not Approval.objects.filter(approver=approver1).exists()
    refund_request.refresh_from_db()
    assert refund_request.status == Status.CANCELLED and not Refund.objects.exists()


def test_stale_page_cannot_decide_an_expired_request(client, approver1, refund_request, monkeypatch):
    client.force_login(approver1)
    later = refund_request.expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)

    response = client.post(_reject_url(refund_request), {"reason": "too late anyway"})

    assert response.status_code == 302
    assert "expired" in _messages(response)[0][1]
    assert not Approval.objects.exists()
    refund_request.refresh_from_db()
    assert refund_request.status == Status.EXPIRED
    history = _page(client, approver1, "approvals:history").context["rows"]
    assert [(r.pk, r.display_status) for r in history] == [(refund_request.pk, "EXPIRED")]
    assert _page(client, approver1).context["rows"] == []


def test_a_request_past_its_deadline_is_settled_when_the_dashboard_is_read(client, approver1, refund_request,
                                                                          monkeypatch):
    # No beat ran: reading the page settles it (settle-on-read, docs/decisions.md), audited EXPIRED.
    monkeypatch.setattr(clock, "now", lambda: refund_request.expires_at + datetime.timedelta(seconds=1))

    assert _page(client, approver1).context["rows"] == []
    history = _page(client, approver1, "approvals:history").context["rows"]
    assert [(r.pk, r.status, r.display_status) for r in history] == [(refund_request.pk, Status.EXPIRED, "EXPIRED")]
    assert AuditEvent.objects.filter(confirmation_id=refund_request.pk, decision="EXPIRED").count() == 1


def test_reject_needs_a_reason(client, approver1, refund_request):
    client.force_login(approver1)

    response = client.post(_reject_url(refund_request), {"reason": "   "})

    assert response.status_code == 302
    assert "needs a reason" in _messages(response)[0][1]
    refund_request.refresh_from_db()
    assert refund_request.status == Status.PENDING and not Approval.objects.exists()


def test_reject_with_reason_settles_the_request_and_shows_in_history(client, approver1, refund_request):
    client.force_login(approver1)

    response = client.post(_reject_url(refund_request), {"reason": "customer already got a voucher"})

    assert any("Rejected" in text for level, text in _messages(response) if level == "success")
    refund_request.refresh_from_db()
    assert refund_request.status == Status.CANCELLED
    assert refund_request.approvals.get().comment == "customer already got a voucher"
    response = _page(client, approver1, "approvals:history")
    assert [(r.pk, r.display_status) for r in response.context["rows"]] == [(refund_request.pk, "REJECTED")]
    assert "customer already got a voucher" in response.content.decode()


def test_other_tenant_gets_404_and_sees_nothing(client, outsider_approver, refund_request):
    assert _page(client, outsider_approver).context["rows"] == []
    assert _page(client, outsider_approver, "approvals:history").context["rows"] == []

    assert client.post(_approve_url(refund_request), {"comment": "x"}).status_code == 404
    assert client.post(_reject_url(refund_request), {"reason": "x"}).status_code == 404
    assert client.post(reverse("approvals:approve", args=["not-a-uuid"])).status_code == 404

    refund_request.refresh_from_db()
    assert refund_request.status == Status.PENDING and not Approval.objects.exists()


def test_decisions_need_post_and_csrf(approver1, refund_request):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(approver1)
    assert client.get(_approve_url(refund_request)).status_code == 405
    assert client.post(_approve_url(refund_request), {"comment": "no token"}).status_code == 403
    assert not Approval.objects.exists()


@pytest.mark.parametrize("name", ["approvals:pending", "approvals:history"])
def test_empty_tabs_say_so(client, approver1, name):
    response = _page(client, approver1, name)
    assert response.status_code == 200 and response.context["rows"] == []
    assert "Nothing waits for you" in response.content.decode() or "No decided" in response.content.decode()


def test_my_requests_and_history_page_through_with_the_shared_pager(client, requester, approver1,
                                                                     refund_request, cancel_request, monkeypatch):
    # given: one request per page, the requester's two requests (newest first), one of them decided
    from approvals import views

    monkeypatch.setattr(views, "HISTORY_PAGE_SIZE", 1)
    approver_actions.confirmation_reject(request_id=refund_request.pk, approver=approver1, reason="not this one")
    client.force_login(requester)
    # when: the requester walks My requests
    first = client.get(reverse("approvals:mine")).content.decode()
    second = client.get(reverse("approvals:mine") + "?page=2").content.decode()
    # then: two pages, each with one request and the way to the other
    assert "Page 1 of 2" in first and "?page=2" in first and "← Newer" not in first
    assert "Page 2 of 2" in second and "?page=1" in second and "Older →" not in second
    assert (cancel_request.summary in first) != (cancel_request.summary in second)
    # and the approver's history, with one decided request, has no pager at all
    client.force_login(approver1)
    history = client.get(reverse("approvals:history")).content.decode()
    assert refund_request.summary.split(" / ")[0][:20] in history and 'class="pager"' not in history


def test_a_second_click_says_the_first_decision_stands(client, approver1, refund_request):
    # a double submit used to read "your decision was not recorded"
    _page(client, approver1)
    first = client.post(_approve_url(refund_request), {"comment": "ok"})
    again = client.post(_approve_url(refund_request), {"comment": "ok"})

    assert first.status_code == again.status_code == 302
    text = _messages(again)[-1][1]
    assert "already decided this request" in text and "stands" in text and "not recorded." not in text
    assert Approval.objects.filter(approver=approver1).count() == 1


@pytest.mark.parametrize("action", ["reject", "approve-to-quorum"])
def test_a_second_click_after_the_first_ended_the_request_says_it_stands(client, approver1, approver2,
                                                                         refund_request, action):
    # once the first click ended the request, the second used to read
    # "your decision was not recorded"
    if action == "approve-to-quorum":
        approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver2)
    _page(client, approver1)
    url = reverse("approvals:reject", args=[refund_request.pk]) if action == "reject" else _approve_url(refund_request)
    data = {"reason": "duplicate refund"} if action == "reject" else {"comment": "ok"}
    client.post(url, data)
    again = client.post(url, data)

    text = _messages(again)[-1][1]
    assert "already decided this request" in text and "stands" in text
    assert Approval.objects.filter(approver=approver1).count() == 1
