"""The requester's page of one gated call (/approvals/mine/<id>/), where an agent's "pending" answer
leads: who may open it, Confirm / Cancel of a call that waits for the requester (run once,
audited, a double submit or a stale page changes nothing twice), Withdraw of a call that waits
for approvers, and the "via MCP" mark of calls that came over MCP."""
from __future__ import annotations

import datetime
import uuid

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from core import clock
from approvals import approver_actions, requester_actions
from approvals.errors import ApprovalForbidden
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.web.conftest import CANCEL_ORDER
from tests.web.requester_support import mcp_call, page_url
from tools.catalog.models import Cancellation, Order

Status = ConfirmationRequest.Status
_page_url = page_url


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def mcp_cancel_request(requester) -> ConfirmationRequest:
    """A PENDING requester-confirmed cancellation (HIGH) asked over MCP with the key "ci-agent"."""
    outcome = mcp_call(requester, "cancel_order", {"order_id": CANCEL_ORDER, "reason": "no longer needed"})
    assert outcome.pending is not None and outcome.pending.needs == "requester"
    return ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)


def test_the_requester_sees_the_call_and_where_it_stands(client, requester, cancel_request):
    client.force_login(requester)

    response = client.get(_page_url(cancel_request))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Cancel an order / 取消订单" in html                   # the tool's bilingual title
    assert cancel_request.summary in html
    assert f"<th>order_id</th><td><code>{CANCEL_ORDER}</code></td>" in html  # the call as approvers see it
    assert "Waiting for your confirmation. / 等待您的确认。" in html
    assert f'data-expires-at="{cancel_request.expires_at.isoformat()}"' in html
    assert 'data-testid="confirm"' in html and 'data-testid="cancel"' in html
    assert 'data-testid="withdraw"' not in html
    assert 'data-testid="via-mcp"' not in html                   # asked in our own chat
    assert "ct_" not in html                                     # no confirmation token on the page


@pytest.mark.parametrize("who", ["nobody", "approver1", "outsider"])
def test_anyone_but_the_requester_gets_404_and_decides_nothing(client, request, who, cancel_request,
                                                                refund_request):
    client.force_login(request.getfixturevalue(who))

    for gated in (cancel_request, refund_request):
        assert client.get(_page_url(gated)).status_code == 404
    assert client.post(reverse("approvals:mine-confirm", args=[cancel_request.pk])).status_code == 404
    assert client.post(reverse("approvals:mine-cancel", args=[cancel_request.pk])).status_code == 404

    cancel_request.refresh_from_db()
    assert cancel_request.status == Status.PENDING
    assert not Cancellation.objects.exists()


def test_an_unknown_id_and_anonymous_people(client, requester, cancel_request):
    assert client.get(_page_url(cancel_request)).status_code == 302  # to sign in
    client.force_login(requester)
    assert client.get(reverse("approvals:mine-detail", args=[uuid.uuid4()])).status_code == 404


def test_confirm_runs_the_call_once_and_is_audited(client, requester, cancel_request,
                                                    django_capture_on_commit_callbacks):
    client.force_login(requester)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("approvals:mine-confirm", args=[cancel_request.pk]))

    assert response.status_code == 302 and response["Location"] == _page_url(cancel_request)
    cancel_request.refresh_from_db()
    assert cancel_request.status == Status.CONSUMED and cancel_request.outcome_code == "OK"
    assert cancel_request.decided_by_id == requester.pk
    assert Cancellation.objects.filter(order__order_id=CANCEL_ORDER).count() == 1
    assert Order.objects.get(order_id=CANCEL_ORDER).status == "CANCELLED"
    confirmed = AuditEvent.objects.filter(confirmation_id=cancel_request.pk, decision="CONFIRMED")
    assert [row.actor_id for row in confirmed] == [requester.pk]
    page = client.get(_page_url(cancel_request)).content.decode()
    assert "It ran. / 已执行。" in page and 'data-outcome="EXECUTED"' in page
    assert 'data-testid="confirm"' not in page

    # The same form posted again (a double click, the back button): a message, nothing twice.
    with django_capture_on_commit_callbacks(execute=True):
        again = client.post(reverse("approvals:mine-confirm", args=[cancel_request.pk]))

    assert again.status_code == 302
    assert any("already decided" in text for text in _messages(again))
    assert Cancellation.objects.filter(order__order_id=CANCEL_ORDER).count() == 1
    assert AuditEvent.objects.filter(confirmation_id=cancel_request.pk, decision="CONFIRMED").count() == 1


def test_cancel_declines_and_nothing_runs(client, requester, cancel_request, django_capture_on_commit_callbacks):
    client.force_login(requester)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("approvals:mine-cancel", args=[cancel_request.pk]), follow=True)

    cancel_request.refresh_from_db()
    assert cancel_request.status == Status.CANCELLED and cancel_request.decided_by_id == requester.pk
    assert not Cancellation.objects.exists()
    assert Order.objects.get(order_id=CANCEL_ORDER).status != "CANCELLED"
    assert AuditEvent.objects.filter(confirmation_id=cancel_request.pk, decision="CANCELLED",
                                     actor_id=requester.pk).count() == 1
    html = response.content.decode()
    assert "You cancelled it; nothing ran. / 您已取消，未执行。" in html
    assert 'data-testid="confirm"' not in html


def test_a_stale_page_confirming_a_cancelled_call_changes_nothing(client, requester, cancel_request,
                                                                   django_capture_on_commit_callbacks):
    client.force_login(requester)
    stale = client.get(_page_url(cancel_request)).content.decode()  # two tabs show Confirm
    assert 'data-testid="confirm"' in stale
    client.post(reverse("approvals:mine-cancel", args=[cancel_request.pk]))

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("approvals:mine-confirm", args=[cancel_request.pk]), follow=True)

    assert response.status_code == 200
    assert "This request was already decided; nothing was done again." in response.content.decode()
    cancel_request.refresh_from_db()
    assert cancel_request.status == Status.CANCELLED
    assert not Cancellation.objects.exists()
    assert not AuditEvent.objects.filter(confirmation_id=cancel_request.pk, decision="CONFIRMED").exists()


def test_an_expired_call_cannot_be_confirmed(client, requester, cancel_request):
    ConfirmationRequest.objects.filter(pk=cancel_request.pk).update(
        expires_at=clock.now() - datetime.timedelta(seconds=1))
    client.force_login(requester)

    assert "Expired before anyone decided" in client.get(_page_url(cancel_request)).content.decode()
    response = client.post(reverse("approvals:mine-confirm", args=[cancel_request.pk]), follow=True)

    assert "expired before your decision" in response.content.decode()
    cancel_request.refresh_from_db()
    assert cancel_request.status == Status.EXPIRED
    assert not Cancellation.objects.exists()


def test_a_call_waiting_on_approvers_shows_the_quorum_and_offers_withdraw(client, requester, approver1,
                                                                          refund_request):
    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver1, comment="looks right")
    client.force_login(requester)

    html = client.get(_page_url(refund_request)).content.decode()

    assert "Refund an order / 订单退款" in html
    assert "Waiting for approvers: 1 of 2 approval(s) so far." in html
    assert '<span class="quorum" data-testid="quorum">1 / 2</span>' in html
    assert "looks right" in html and "approver1" in html           # who decided what so far
    assert 'data-testid="confirm"' not in html and 'data-testid="withdraw"' in html
    assert 'data-testid="eligible-approvers"' not in html           # who may approve is not the requester's

    response = client.post(reverse("approvals:withdraw", args=[refund_request.pk]),
                           {"reason": "not needed", "back": "page"})

    assert response["Location"] == _page_url(refund_request)
    refund_request.refresh_from_db()
    assert refund_request.status == Status.WITHDRAWN
    assert "You withdrew it; nothing ran." in client.get(_page_url(refund_request)).content.decode()


def test_a_rejection_shows_who_and_why(client, requester, approver1, refund_request):
    approver_actions.confirmation_reject(request_id=refund_request.pk, approver=approver1, reason="amount looks wrong")
    client.force_login(requester)

    html = client.get(_page_url(refund_request)).content.decode()

    assert "Rejected; nothing ran." in html
    assert 'data-testid="decided-by">acme-approver1 (approver)' in html and "amount looks wrong" in html


def test_the_approver_page_of_my_own_request_leads_to_mine(client, requester, approver1, refund_request):
    client.force_login(requester)
    response = client.get(reverse("approvals:detail", args=[refund_request.pk]))
    assert response.status_code == 302 and response["Location"] == _page_url(refund_request)

    client.force_login(approver1)  # an approver of it keeps the approver's page
    assert client.get(reverse("approvals:detail", args=[refund_request.pk])).status_code == 200


def test_a_call_made_over_mcp_is_marked_and_runs_once_on_the_retry(client, requester, mcp_cancel_request):
    first = AuditEvent.objects.filter(confirmation_id=mcp_cancel_request.pk).order_by("occurred_at").first()
    assert first.channel["name"] == "mcp" and first.channel["api_key"] == "ci-agent"
    client.force_login(requester)

    html = client.get(_page_url(mcp_cancel_request)).content.decode()
    assert 'data-testid="via-mcp" data-key="ci-agent"' in html and "via MCP · ci-agent" in html
    assert "经由 MCP" in html
    assert 'data-testid="via-mcp"' in client.get(reverse("approvals:mine")).content.decode()

    client.post(reverse("approvals:mine-confirm", args=[mcp_cancel_request.pk]))
    mcp_cancel_request.refresh_from_db()
    assert mcp_cancel_request.status == Status.CONFIRMED          # no run to resume: the client retries
    assert "Approved: it runs when its turn comes" in client.get(_page_url(mcp_cancel_request)).content.decode()

    for _ in range(2):  # the client's retries: one execution, then the stored answer
        mcp_call(requester, "cancel_order", {"order_id": CANCEL_ORDER, "reason": "no longer needed"},
                 confirmation=mcp_cancel_request.pk)
    assert Cancellation.objects.filter(order__order_id=CANCEL_ORDER).count() == 1
    assert 'data-outcome="EXECUTED"' in client.get(_page_url(mcp_cancel_request)).content.decode()


def test_the_approver_and_the_auditor_see_the_mcp_mark(client, requester, approver1, people):
    outcome = mcp_call(requester, "refund_order", {"order_id": "A202607290003", "amount": "50",
                                                   "reason": "arrived broken"})
    assert outcome.pending is not None and outcome.pending.needs == "approvers"
    client.force_login(approver1)

    inbox = client.get(reverse("approvals:pending")).content.decode()
    detail = client.get(reverse("approvals:detail", args=[outcome.pending.confirmation_id])).content.decode()

    assert inbox.count('data-testid="via-mcp"') == 2                # the line, and the open pane
    assert "via MCP · ci-agent" in detail
    client.force_login(people["acme"]["auditor"])  # the trail's rows of the call
    trail = client.get(reverse("auditor:trail")).content.decode()
    assert 'data-testid="via-mcp" data-key="ci-agent"' in trail


def test_an_approver_gated_call_cannot_be_confirmed_by_its_requester(client, requester, refund_request):
    client.force_login(requester)

    assert client.post(reverse("approvals:mine-confirm", args=[refund_request.pk])).status_code == 404

    refund_request.refresh_from_db()
    assert refund_request.status == Status.PENDING
    assert not AuditEvent.objects.filter(confirmation_id=refund_request.pk, decision="CONFIRMED").exists()


@pytest.mark.postgres
def test_confirm_and_cancel_clicked_at_once_in_many_tabs_decide_once(transactional_db, requester):
    # given: a call waiting for its requester, open in ten tabs (ten signed-in clients)
    from django.test import Client

    from agentplatform.runtime import services
    from tests.tools.support import race

    outcome = services.chat_send(user=requester, message=f"cancel {CANCEL_ORDER} because no longer needed")
    request_id = outcome.pending[0].confirmation_id
    clicks = ["mine-confirm"] * 7 + ["mine-cancel"] * 3

    def prepare(i):
        tab = Client()
        tab.force_login(requester)
        return tab, clicks[i]

    def click(state):
        tab, name = state
        response = tab.post(reverse(f"approvals:{name}", args=[request_id]), follow=True)
        return name, "already decided" in response.content.decode()

    # when: every tab clicks at the same moment (the run resumes after the winning commit)
    results = race(len(clicks), prepare, click)

    # then: one decision took effect, every other click was told it was already decided
    assert sum(not refused for _, refused in results) == 1, results
    [(winner, _)] = [r for r in results if not r[1]]
    decided = AuditEvent.objects.filter(confirmation_id=request_id, decision__in=("CONFIRMED", "CANCELLED"),
                                        actor_id=requester.pk)
    assert decided.count() == 1
    ran = Cancellation.objects.filter(order__order_id=CANCEL_ORDER).count()
    assert ran == (1 if winner == "mine-confirm" else 0)


def test_a_service_account_never_confirms_its_call(client, people):
    # given: the seeded service account granted cancel_order asks for a cancellation over MCP
    from guardian.shortcuts import assign_perm

    from tools.models import Tool

    integration = people["acme"]["integration"]
    assign_perm("tools.use_tool", integration, Tool.objects.get(name="cancel_order"))
    assign_perm("catalog.cancel_order", integration)
    pending = mcp_call(integration, "cancel_order", {"order_id": CANCEL_ORDER, "reason": "no longer needed"}).pending
    assert pending is not None and pending.needs == "requester"
    client.force_login(integration)

    # when: it posts Confirm from the page, or calls the service directly
    response = client.post(reverse("approvals:mine-confirm", args=[pending.confirmation_id]))
    with pytest.raises(ApprovalForbidden):
        requester_actions.confirmation_confirm_own(request_id=pending.confirmation_id, user=integration)

    # then: the page has no session for it (sent to sign in), the service refuses; nothing ran,
    # and declining stays possible
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == Status.PENDING
    assert not Cancellation.objects.exists()
    requester_actions.confirmation_cancel_own(request_id=pending.confirmation_id, user=integration)
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == Status.CANCELLED


def test_the_mcp_pending_answer_leads_to_this_page_and_the_retry_after_confirming_runs_once(
        client, settings, requester):
    # given: a HIGH call over MCP through the MCP call service, answered "pending"
    from agentplatform.mcp_server import calls
    from tests.mcp_server.calls_support import principal_of

    settings.PLATFORM_BASE_URL = "https://platform.example"
    principal, raw_key = principal_of(requester, name="ide-assistant")
    arguments = {"order_id": CANCEL_ORDER, "reason": "no longer needed"}
    answer = calls.call_tool(principal, name="cancel_order", arguments=arguments)
    assert answer.state == "pending" and answer.pending["needs"] == "requester"
    request_id = answer.pending["request_id"]
    assert answer.pending["url"] == "https://platform.example" + page_url(request_id)

    # when: the requester opens that page, sees the mark, and confirms
    client.force_login(requester)
    html = client.get(page_url(request_id)).content.decode()
    assert 'data-testid="via-mcp" data-key="ide-assistant"' in html and raw_key not in html
    client.post(reverse("approvals:mine-confirm", args=[request_id]))

    # then: the client's retries run it once, then replay the stored answer; the page says it ran
    first = calls.call_tool(principal, name="cancel_order", arguments=arguments)
    second = calls.call_tool(principal, name="cancel_order", arguments=arguments)
    assert first.state == second.state == "completed"
    assert Cancellation.objects.filter(order__order_id=CANCEL_ORDER).count() == 1
    assert 'data-outcome="EXECUTED"' in client.get(page_url(request_id)).content.decode()
