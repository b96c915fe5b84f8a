"""Notices that follow a request after the first one: a follow-up when an approver edited it, and
a retraction when it no longer needs the approvers who were asked (docs/notifications.md).

- `notify_revised`: the people who must decide the new revision (notifications.recipients.
  must_decide_revision: never the editor) read who edited it and what changed, old -> new (masked);
  webhook `approval.revised`.
- `notify_retraction`: the people who were asked to decide it and did not decide it themselves
  read that it no longer needs them and why: decided by X, withdrawn by the requester, expired,
  replaced by a newer request (or its tool was stopped by an administrator). Webhook `approval.retracted` for a withdrawal or a replacement (a
  decision and an expiry already send `approval.decided`).

Once each per (request, recipient, kind, revision) (notifications.sending). Never inside a transaction.
"""
from __future__ import annotations

import uuid

from approvals import eligibility
from approvals.models import Approval, ConfirmationRequest
from approvals.signals import SUPERSEDED, WITHDRAWN
from core.redaction.text import mask_json
from notifications import approver_mail, content, recipients, wording
from notifications.models import Notice
from notifications.sending import email_each, load, webhooks_once

Status = ConfirmationRequest.Status
Kind = Notice.Kind
STOPPED = "STOPPED"


def notify_revised(*, request_id: uuid.UUID | str, revision: int) -> dict[str, int]:
    """Tell the approvers who must decide revision `revision` of `request_id` that it was edited
    (email) and the tenant's relays (webhook `approval.revised`), once each. Nothing when the
    request no longer waits, or was edited again since (the newer edit tells).

    Returns {"emails": messages sent, "webhooks": deliveries started}.
    """
    request = load(request_id)
    if (request is None or request.policy != ConfirmationRequest.Policy.APPROVERS
            or request.status != Status.PENDING or request.revision != int(revision)):
        return {"emails": 0, "webhooks": 0}
    edit = (Approval.objects.select_related("approver")
            .filter(request_id=request.pk, revision=request.revision, decision=Approval.Decision.EDIT).first())
    extra = mask_json({"changes": edit.changes if edit else [], "comment": edit.comment if edit else "",
                       "editor_name": wording.display_name(edit.approver if edit else None)})
    body = content.request_document(request, event=content.REVISED, extra=extra)
    sent = email_each(request=request, kind=Kind.REVISED, people=recipients.must_decide_revision(request),
                      write=lambda user: approver_mail.revised_email(body))
    return {"emails": sent, "webhooks": webhooks_once(request, content.REVISED, extra=extra)}


def notify_retraction(*, request_id: uuid.UUID | str, ending: str,
                      replaced_by: uuid.UUID | str | None = None) -> dict[str, int]:
    """Tell the approvers who were asked to decide `request_id` and did not decide it themselves
    that it no longer needs them, and why (`ending`: approvals.signals ENDINGS, or STOPPED: an
    administrator stopped its tool, which cancelled it), once each.

    replaced_by (SUPERSEDED): the newer request. Its own email tells the people who may decide it
    (notify_approvers' `replaces`), so they are left out here: one email, not two.
    Returns {"emails": messages sent, "webhooks": deliveries started}.
    """
    request = load(request_id)
    if request is None or request.policy != ConfirmationRequest.Policy.APPROVERS or request.status == Status.PENDING:
        return {"emails": 0, "webhooks": 0}
    if ending == STOPPED and request.outcome_code != "TOOL_STOPPED":  # a rejection: told as DECIDED
        return {"emails": 0, "webhooks": 0}
    extra = {"ending": ending}
    people = recipients.to_retract(request)
    newer = load(replaced_by) if ending == SUPERSEDED else None
    if newer is not None:
        extra["replacement"] = {"summary": newer.summary, "url": content.approver_link(newer)}
        if newer.status == Status.PENDING and newer.policy == ConfirmationRequest.Policy.APPROVERS:
            told_there = {u.pk for u in eligibility.deciders_of(newer) if u.email}
            people = [u for u in people if u.pk not in told_there]
    body = content.request_document(request, event=content.RETRACTED, extra=mask_json(extra))
    sent = email_each(request=request, kind=Kind.RETRACTED, people=people,
                      write=lambda user: approver_mail.retracted_email(body))
    webhooks = webhooks_once(request, content.RETRACTED, extra=extra) if ending in (WITHDRAWN, SUPERSEDED) else 0
    return {"emails": sent, "webhooks": webhooks}
