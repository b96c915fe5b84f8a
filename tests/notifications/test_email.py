"""Email notifications: the people who may decide a request are told, and only they; the
requester is told how it was decided; the approval context is in the message; no token anywhere."""
from __future__ import annotations

import datetime
import re

import pytest
from django.core import mail
from guardian.shortcuts import assign_perm, remove_perm

from core import clock
from agentplatform.runtime import services as runtime
from approvals import approver_actions, expiry
from approvals.models import ConfirmationRequest
from tools.models import Tool

pytestmark = pytest.mark.django_db


def _to(messages) -> list[str]:
    return sorted(address for m in messages for address in m.to)


def _for(address: str) -> list:
    return [m for m in mail.outbox if m.to == [address]]


def test_the_approvers_who_may_decide_are_emailed_and_nobody_else(people, make_refund, requester):
    # given every persona of both tenants has an email address (the demo seed)
    assert all(u.email for tenant in people.values() for u in tenant.values())

    request = make_refund()

    # then exactly acme's two approvers: not the requester, not acme's administrator or member
    # without grants, nobody of globex (whose approvers hold the same grant on the same tool)
    assert _to(mail.outbox) == ["acme-approver1@example.com", "acme-approver2@example.com"]
    assert all(len(m.to) == 1 and not m.cc and not m.bcc for m in mail.outbox)  # nobody sees the others
    message = mail.outbox[0]
    assert "Approval needed" in message.subject and request.summary in message.subject
    assert f"/approvals/{request.pk}/" in message.body


def test_the_email_carries_the_approval_context(settings, make_refund):
    settings.PLATFORM_BASE_URL = "https://approvals.example.com"

    request = make_refund()

    body = mail.outbox[0].body
    assert f"Decide here / 去审批: https://approvals.example.com/approvals/{request.pk}/" in body
    assert "Requested by / 申请人: acme-requester" in body
    assert "Tool / 工具: Refund an order / 订单退款" in body  # the tool's title, never its wire name
    assert "Risk / 风险: Critical / 极高" in body
    assert "Approvals / 批准: 0 of 2" in body
    assert "refund_order" not in body and "CRITICAL" not in body
    # no identifier in the words, only in the link
    assert str(request.pk) not in body.replace(f"/approvals/{request.pk}/", "")
    facts = request.approval_context["facts"]
    assert facts  # the refund tool declares facts (docs/approvals.md)
    assert "Order total / 订单金额: " + facts["order_total"]["display"] in body
    assert "Refundable remainder / 可退余额: " + facts["refundable_remainder"]["display"] in body
    # the model's own words are quoted and labelled, not presented as the platform's
    assert "Written by the assistant, not checked by the platform" in body
    assert "\u201cit arrived broken\u201d" in body


def test_people_who_lost_the_grant_or_left_are_not_emailed_and_a_direct_grant_counts(
        people, make_refund, approver1, approver2, nobody):
    refund = Tool.objects.get(name="refund_order")
    approver2.is_active = False
    approver2.save()
    assign_perm("tools.approve_tool", nobody, refund)  # a direct (user) grant

    make_refund()

    assert _to(mail.outbox) == ["acme-approver1@example.com", "acme-nobody@example.com"]

    mail.outbox.clear()
    remove_perm("tools.approve_tool", nobody, refund)
    approver1.email = ""  # no address: skipped, not an error
    approver1.save()
    make_refund(text="Refund A202607290003 amount 20 because a part is missing")
    # nobody is not asked to decide the new request; they only read that the one they were
    # asked about (replaced by it) no longer needs them
    assert [(m.to, m.subject.split(":")[0]) for m in mail.outbox] == [
        (["acme-nobody@example.com"], "[agentplatform] No longer needs your decision / 无需再审批")]


def test_a_requester_confirmed_call_emails_no_approver(requester, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outcome = runtime.chat_send(user=requester, message="cancel A202607290001 because no longer needed")
    assert outcome.pending[0].needs == "requester"
    assert mail.outbox == []


def test_the_requester_is_emailed_when_the_approvers_decide(make_refund, approver1, approver2,
                                                            django_capture_on_commit_callbacks):
    request = make_refund()
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request.pk, approver=approver1, comment="looks right")
    assert mail.outbox == []  # 1 of 2: not decided yet

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request.pk, approver=approver2)
    assert _to(mail.outbox) == ["acme-requester@example.com"]
    message = mail.outbox[0]
    assert "Your request / 您的请求: approved / 已批准 \u2014 " + request.summary in message.subject
    assert "Result / 结果: approved" in message.body and "Approvals / 批准: 2 of 2" in message.body
    assert "Decided by / 决定人: acme-approver2" in message.body
    assert "/chat/?c=" + str(request.conversation_id) in message.body


def test_the_requester_is_told_the_reason_of_a_rejection(make_refund, approver1, django_capture_on_commit_callbacks):
    request = make_refund()
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=request.pk, approver=approver1,
                                      reason="no photo of the damage; card 4111 1111 1111 1111")

    [told] = _for("acme-requester@example.com")
    body = told.body
    assert "Result / 结果: rejected; nothing was done" in body
    assert "Decided by / 决定人: acme-approver1" in body
    assert "Reason / 原因: no photo of the damage; card 4111****1111" in body  # masked on the way out
    assert "4111 1111 1111 1111" not in body


def test_the_requester_is_told_when_nobody_decided_in_time(make_refund, django_capture_on_commit_callbacks):
    request = make_refund()
    mail.outbox.clear()
    ConfirmationRequest.objects.filter(pk=request.pk).update(expires_at=clock.now() - datetime.timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=True):
        assert expiry.confirmations_expire() == [request.pk]

    [told] = _for("acme-requester@example.com")
    assert "expired before anyone decided" in told.body


def test_no_token_reaches_an_email(requester, make_refund, approver1, approver2, django_capture_on_commit_callbacks):
    # a requester-confirmed call mints a token; approver-gated ones have none
    with django_capture_on_commit_callbacks(execute=True):
        outcome = runtime.chat_send(user=requester, message="cancel A202607290001 because no longer needed")
        token = outcome.pending[0].token
        assert token and token.startswith("ct_")
        # the requester pastes the token into a message that leads to an approver-gated request
        runtime.chat_send(user=requester, message=f"Refund A202607290003 amount 50 because {token} broken")
    request = ConfirmationRequest.objects.filter(policy="APPROVERS").get()
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=request.pk, approver=approver1, reason=f"token {token} pasted")

    # two approvers, the requester, and the retraction to the approver who did not decide
    assert len(mail.outbox) == 4
    for message in mail.outbox:
        assert token not in message.subject + message.body
        assert not re.search(r"\bct_[A-Za-z0-9_\-]{16,}", message.body)


def test_a_call_sent_back_to_approvers_emails_them(requester, django_capture_on_commit_callbacks):
    # a requester-confirmed cancellation whose tool became CRITICAL before the confirmation was used
    from tools.models import RiskLevel

    first = runtime.chat_send(user=requester, message="cancel A202607290001 because the customer changed their mind")
    [pending] = first.pending
    Tool.objects.filter(name="cancel_order").update(risk_override=RiskLevel.CRITICAL)
    assert mail.outbox == []

    with django_capture_on_commit_callbacks(execute=True):
        runtime.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                          confirmation_token=pending.token)

    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.policy) == (ConfirmationRequest.Status.PENDING, "APPROVERS")
    assert _to(mail.outbox) == ["acme-approver1@example.com", "acme-approver2@example.com"]
    assert f"/approvals/{request.pk}/" in mail.outbox[0].body
    assert pending.token not in mail.outbox[0].body


def test_the_requesters_email_counts_approvals_as_the_quorum_does(make_refund, approver1, approver2,
                                                                   django_capture_on_commit_callbacks):
    # found by a probe: after an edit the email said "Approvals: 1 / 2" of a call that
    # ran with 2 of 2 (the edit counts; decisions on an earlier revision do not)
    request = make_refund()
    stored = ConfirmationRequest.objects.get(pk=request.pk)
    edited = {**stored.arguments, "amount": "20.00"}
    from approvals.amendments import confirmation_edit

    with django_capture_on_commit_callbacks(execute=True):
        confirmation_edit(request_id=request.pk, editor=approver2, arguments=edited,
                          base_arguments_hash=stored.arguments_hash)
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request.pk, approver=approver1,
                                       arguments_hash=ConfirmationRequest.objects.get(pk=request.pk).arguments_hash)

    decided = [m for m in mail.outbox if "acme-requester@example.com" in m.to]
    assert decided and "Approvals / 批准: 2 of 2" in decided[0].body, [m.body for m in decided]
