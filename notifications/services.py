"""Notifications about approval requests (docs/notifications.md).

- `notify_approvers`: a request waits for approvers -> an email to each person who may decide it
  (approvals.eligibility.deciders_of) and an `approval.requested` webhook; when it replaced older
  requests for the same action, the email also tells those who were asked about them that they no
  longer need to decide them (one email, not two).
- `notify_requester`: an approver-gated request was approved (quorum reached), rejected or
  expired -> an email to its requester and an `approval.decided` webhook.
- `notify_revised` and `notify_retraction` (notifications.followups): an edit, an ending.

Each notice is sent at most once per (request, recipient, kind, revision) (notifications.sending).
None of them runs inside a transaction: the receivers start them after the deciding transaction
committed, through `notifications.dispatch.dispatch`.
"""
from __future__ import annotations

import logging
import uuid

from approvals import eligibility
from approvals.models import ConfirmationRequest
from notifications import approver_mail, content, ledger, recipients
from notifications.followups import notify_retraction, notify_revised
from notifications.models import Notice
from notifications.sending import email_each, load, webhooks_once

__all__ = ["notify_approvers", "notify_requester", "notify_retraction", "notify_revised"]

logger = logging.getLogger(__name__)

Status = ConfirmationRequest.Status
Kind = Notice.Kind
NOTHING = {"emails": 0, "webhooks": 0}


def notify_approvers(*, request_id: uuid.UUID | str, replaces: list[str] | tuple = (),
                     again: bool = False) -> dict[str, int]:
    """Tell the people who may decide `request_id` that it waits for them (email) and the tenant's
    relays (webhook `approval.requested`), once each. Nothing when the request no longer waits for
    approvers (decided meanwhile, expired, requester-confirmed). Users without an email address
    are skipped.

    replaces: ids of the older requests it superseded; a recipient who was asked about one of them
    reads in this email that it no longer needs them (its RETRACTED notice). again: the request
    waits again under a stricter policy (notice REGATED, told as such).
    Returns {"emails": messages sent, "webhooks": deliveries started}.
    """
    request = load(request_id)
    if (request is None or request.policy != ConfirmationRequest.Policy.APPROVERS
            or request.status != Status.PENDING):
        return dict(NOTHING)
    body = content.request_document(request, event=content.REQUESTED)
    replaced = [old for old in (load(i) for i in replaces) if old is not None and old.status == Status.SUPERSEDED]
    waiting_on = {old.pk: {u.pk for u in recipients.to_retract(old)} for old in replaced}

    carried: dict[uuid.UUID, list[int]] = {old.pk: [] for old in replaced}

    def write(user) -> tuple[str, str]:
        told = []
        for old in replaced:
            if user.pk in waiting_on[old.pk] and ledger.claim(request=old, kind=Kind.RETRACTED,
                                                              revision=old.revision, recipient_id=user.pk):
                told.append(old.summary)
                carried[old.pk].append(user.pk)
        return approver_mail.asked_email(body, again=again, replaced=told)

    sent = email_each(request=request, kind=Kind.REGATED if again else Kind.REQUESTED,
                      people=eligibility.deciders_of(request), write=write)
    for old in replaced:  # the retractions these emails carried went with them
        ledger.settle(request=old, kind=Kind.RETRACTED, revision=old.revision, recipient_ids=carried[old.pk],
                      error="" if sent else "not sent with the newer request's email")
    webhooks = webhooks_once(request, content.REQUESTED, kind=Kind.REGATED if again else Kind.REQUESTED)
    logger.info("request %s: approvers told (%d emails, %d webhooks)", request.pk, sent, webhooks)
    return {"emails": sent, "webhooks": webhooks}


def notify_requester(*, request_id: uuid.UUID | str) -> dict[str, int]:
    """Tell the requester of an approver-gated request how it was decided: approved (quorum
    reached), rejected (with the approver's reason) or expired (email), and the tenant's relays
    (webhook `approval.decided`), once each. Requester-confirmed requests (the requester decided
    them) and other endings (superseded, withdrawn, the run cancelled) send nothing.

    Returns {"emails": messages sent, "webhooks": deliveries started}.
    """
    request = load(request_id)
    if request is None or request.policy != ConfirmationRequest.Policy.APPROVERS:
        return dict(NOTHING)
    decided = request.status in (Status.CONFIRMED, Status.CONSUMED, Status.EXPIRED, Status.REFUSED) or (
        request.status == Status.CANCELLED and request.outcome_code != "RUN_ENDED")
    if not decided:
        return dict(NOTHING)
    body = content.request_document(request, event=content.DECIDED)
    sent = email_each(request=request, kind=Kind.DECIDED, people=[request.user],
                      write=lambda user: content.requester_email(body))
    return {"emails": sent, "webhooks": webhooks_once(request, content.DECIDED)}
