"""Notifications that follow the request: a follow-up when an approver edits it (to those who must
approve again, never the editor), a retraction when it ends (decided, withdrawn, expired, replaced)
to everyone who was asked and did not decide it, in plain words with links under the base URL."""
from __future__ import annotations

import datetime
import re

import pytest
from django.core import mail
from guardian.shortcuts import assign_perm

from approvals import approver_actions, expiry, requester_actions
from approvals.amendments import confirmation_edit
from approvals.models import ConfirmationRequest
from core import clock
from notifications.models import Notice
from tools.models import Tool

pytestmark = pytest.mark.django_db

BASE = "https://approvals.example.com"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CODES = ("refund_order", "PENDING", "SUPERSEDED", "WITHDRAWN", "EXPIRED", "CANCELLED", "CONFIRMED", "CRITICAL",
         "REJECTED", "APPROVERS")


@pytest.fixture(autouse=True)
def _base_url(settings):
    settings.PLATFORM_BASE_URL = BASE


@pytest.fixture
def approver3(nobody):
    """acme-nobody, given approve_tool on refunds directly (before any request: standing that
    began after a request does not count toward it)."""
    assign_perm("tools.approve_tool", nobody, Tool.objects.get(name="refund_order"))
    return nobody


def _mails(address: str) -> list:
    return [m for m in mail.outbox if m.to == [address]]


def _plain(message) -> None:
    """Words without identifiers or codes: a UUID only inside a link under the base URL."""
    for line in [message.subject, *message.body.splitlines()]:
        words = re.sub(re.escape(BASE) + r"\S*", "", line)
        assert not UUID.search(words), line
        assert not any(code in words for code in CODES), line
    assert all(link.startswith(BASE + "/approvals/") for link in re.findall(r"https?://\S+", message.body))


def _commit(django_capture_on_commit_callbacks, action, **kwargs):
    with django_capture_on_commit_callbacks(execute=True):
        return action(**kwargs)


def test_an_edit_asks_again_only_those_who_must_approve_again(make_refund, approver1, approver2, approver3,
                                                              django_capture_on_commit_callbacks):
    request = make_refund()
    assert sorted(a for m in mail.outbox for a in m.to) == [
        "acme-approver1@example.com", "acme-approver2@example.com", "acme-nobody@example.com"]
    _commit(django_capture_on_commit_callbacks, approver_actions.confirmation_approve, request_id=request.pk,
            approver=approver1)
    mail.outbox.clear()

    # when approver2 edits the amount down: approver1's approval stops counting
    _commit(django_capture_on_commit_callbacks, confirmation_edit, request_id=request.pk, editor=approver2,
            arguments={**request.arguments, "amount": "20.00"}, base_arguments_hash=request.arguments_hash,
            comment="half is enough")

    # then approver1 (approved the old revision) and nobody (had not decided) are asked again;
    # the editor and the requester are not
    assert sorted(a for m in mail.outbox for a in m.to) == ["acme-approver1@example.com", "acme-nobody@example.com"]
    [message] = _mails("acme-approver1@example.com")
    assert message.subject.startswith("[agentplatform] Edited, your approval is needed again")
    assert "acme-approver2 edited a request that waits for your decision" in message.body
    assert "What changed / 修改内容:\n  Amount / 金额: 50.00 \u2192 20.00\n" in message.body
    assert "Comment / 说明: half is enough" in message.body
    assert f"Decide here / 去审批: {BASE}/approvals/{request.pk}/" in message.body
    _plain(message)

    # a repeated signal (a retried task) sends nothing more
    from notifications import services

    assert services.notify_revised(request_id=request.pk, revision=1) == {"emails": 0, "webhooks": 0}
    assert len(mail.outbox) == 2


def test_a_decision_is_retracted_from_the_others_who_were_asked(make_refund, approver1, approver2, approver3,
                                                                django_capture_on_commit_callbacks):
    request = make_refund()
    _commit(django_capture_on_commit_callbacks, approver_actions.confirmation_approve, request_id=request.pk,
            approver=approver1)
    mail.outbox.clear()

    _commit(django_capture_on_commit_callbacks, approver_actions.confirmation_approve, request_id=request.pk,
            approver=approver2, comment="fine")

    # the two deciders hear nothing; the one who was asked and did not decide is told who did
    assert _mails("acme-approver1@example.com") == [] and _mails("acme-approver2@example.com") == []
    [message] = _mails("acme-nobody@example.com")
    assert message.subject.startswith("[agentplatform] No longer needs your decision / 无需再审批: ")
    assert "no longer needs your decision: decided by acme-approver2 (approved)." in message.body
    assert f"See it here / 查看: {BASE}/approvals/{request.pk}/" in message.body
    _plain(message)


def test_a_rejection_is_retracted_with_its_reason(make_refund, approver1, approver2,
                                                  django_capture_on_commit_callbacks):
    request = make_refund()
    mail.outbox.clear()

    _commit(django_capture_on_commit_callbacks, approver_actions.confirmation_reject, request_id=request.pk,
            approver=approver1, reason="no photo of the damage")

    assert _mails("acme-approver1@example.com") == []
    [message] = _mails("acme-approver2@example.com")
    assert "decided by acme-approver1 (rejected)" in message.body
    assert "Their words / 决定说明: no photo of the damage" in message.body
    _plain(message)


def test_a_withdrawal_is_retracted(make_refund, requester, django_capture_on_commit_callbacks):
    request = make_refund()
    mail.outbox.clear()

    _commit(django_capture_on_commit_callbacks, requester_actions.confirmation_withdraw, request_id=request.pk,
            requester=requester)

    assert sorted(a for m in mail.outbox for a in m.to) == ["acme-approver1@example.com", "acme-approver2@example.com"]
    for message in mail.outbox:
        assert "no longer needs your decision: withdrawn by the requester. / 此请求无需您再审批：申请人已撤回" in message.body
        _plain(message)


def test_an_expiry_is_retracted(make_refund, django_capture_on_commit_callbacks):
    request = make_refund()
    mail.outbox.clear()
    ConfirmationRequest.objects.filter(pk=request.pk).update(expires_at=clock.now() - datetime.timedelta(seconds=1))

    _commit(django_capture_on_commit_callbacks, expiry.confirmations_expire)

    retractions = [m for m in mail.outbox if "No longer needs your decision" in m.subject]
    assert sorted(a for m in retractions for a in m.to) == ["acme-approver1@example.com", "acme-approver2@example.com"]
    assert all("it expired before anyone decided" in m.body for m in retractions)
    assert _mails("acme-requester@example.com")  # the requester is told the outcome, as before


def test_an_identical_request_replaces_the_old_one_in_one_email(make_refund, approver1, approver2, approver3,
                                                                django_capture_on_commit_callbacks):
    first = make_refund()
    mail.outbox.clear()
    # approver3 lost the grant since: not asked about the new request, so told apart
    from guardian.shortcuts import remove_perm

    remove_perm("tools.approve_tool", approver3, Tool.objects.get(name="refund_order"))

    second = make_refund()  # the same words again: the same business action

    assert ConfirmationRequest.objects.get(pk=first.pk).status == ConfirmationRequest.Status.SUPERSEDED
    for address in ("acme-approver1@example.com", "acme-approver2@example.com"):
        [message] = _mails(address)  # one email: the new request, which says it replaced the old
        assert message.subject.startswith("[agentplatform] Approval needed, replaces an earlier request")
        assert f"Replaced / 已替换: {first.summary}" in message.body
        assert f"Decide here / 去审批: {BASE}/approvals/{second.pk}/" in message.body
        _plain(message)
    [apart] = _mails("acme-nobody@example.com")
    assert "no longer needs your decision: replaced by a newer request for the same action" in apart.body
    assert f"The newer request / 新的请求: {second.summary}\n  {BASE}/approvals/{second.pk}/" in apart.body
    _plain(apart)
    # each of them holds one retraction record of the first request, and no second one is sent
    assert Notice.objects.filter(request=first, kind=Notice.Kind.RETRACTED).count() == 3
    from notifications import services

    assert services.notify_retraction(request_id=first.pk, ending="SUPERSEDED", replaced_by=second.pk)["emails"] == 0


def test_repeated_signals_send_nothing_twice(make_refund, approver1, django_capture_on_commit_callbacks):
    from notifications import services

    request = make_refund()
    assert len(mail.outbox) == 2
    assert services.notify_approvers(request_id=request.pk)["emails"] == 0
    _commit(django_capture_on_commit_callbacks, approver_actions.confirmation_reject, request_id=request.pk,
            approver=approver1, reason="not covered")
    assert len(mail.outbox) == 4  # the requester's outcome, approver2's retraction
    assert services.notify_requester(request_id=request.pk)["emails"] == 0
    assert services.notify_retraction(request_id=request.pk, ending="DECIDED")["emails"] == 0
    assert len(mail.outbox) == 4


def test_a_stopped_tool_is_retracted_from_the_approvers(make_refund, acme_admin, django_capture_on_commit_callbacks):
    from policies.kill_switch import kill_switch_engage

    request = make_refund()
    mail.outbox.clear()

    _commit(django_capture_on_commit_callbacks, kill_switch_engage, tool_name="refund_order", actor=acme_admin,
            reason="payment provider incident")

    retractions = [m for m in mail.outbox if "No longer needs your decision" in m.subject]
    assert sorted(a for m in retractions for a in m.to) == ["acme-approver1@example.com", "acme-approver2@example.com"]
    assert all("an administrator stopped this tool, so nothing will run" in m.body for m in retractions)
    assert all(f"{BASE}/approvals/{request.pk}/" in m.body for m in retractions)
    [told] = _mails("acme-requester@example.com")
    assert "Reason / 原因: payment provider incident" in told.body


def test_a_retraction_never_goes_to_someone_who_left_the_tenant(make_refund, requester, approver1, outsider,
                                                                django_capture_on_commit_callbacks):
    """An approver asked about a request, then moved to another tenant, is no longer one of its
    tenant's people: its ending (who decided, why) is not theirs to read."""
    from django.db import transaction

    request = make_refund()
    assert _mails("acme-approver1@example.com")
    with transaction.atomic():
        approver1.tenant = outsider.tenant
        approver1.save()
    mail.outbox.clear()

    _commit(django_capture_on_commit_callbacks, requester_actions.confirmation_withdraw, request_id=request.pk,
            requester=requester)

    assert sorted(a for m in mail.outbox for a in m.to) == ["acme-approver2@example.com"]
