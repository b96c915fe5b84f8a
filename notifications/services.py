"""Notifications about approval requests (docs/notifications.md).

- `notify_approvers`: a request waits for approvers -> an email to each person who may decide it
  (approvals.selectors.deciders_of: same tenant, `approve_tool` on its tool, not the requester, not
  yet decided) and an `approval.requested` webhook to each active endpoint of its tenant.
- `notify_requester`: an approver-gated request was approved (quorum reached), rejected or
  expired -> an email to its requester and an `approval.decided` webhook.

Each webhook is delivered by `notifications.delivery.deliver_webhook`. Neither function runs
inside a transaction (they make network calls, which must never hold a transaction open): the
receivers start them after the deciding transaction committed, through
`notifications.dispatch.dispatch` (a Celery task with a broker; without one a daemon thread of
this process, so no person's request waits for a slow relay).
"""
from __future__ import annotations

import logging
import uuid

from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from approvals import selectors
from approvals.models import ConfirmationRequest
from notifications import content
from notifications.delivery import deliver_webhook
from notifications.dispatch import dispatch
from notifications.models import WebhookEndpoint

logger = logging.getLogger(__name__)

Status = ConfirmationRequest.Status


def _load(request_id: uuid.UUID | str) -> ConfirmationRequest | None:
    return (ConfirmationRequest.objects.select_related("tenant", "user", "tool", "decided_by")
            .filter(pk=request_id).first())


def _send_emails(recipients: list[tuple[str, str]], subject: str, text: str) -> int:
    """One message per recipient (nobody sees who else was told). Returns how many were sent."""
    if not settings.NOTIFY_EMAIL or not recipients:
        return 0
    messages = [EmailMessage(subject=subject, body=text, to=[address]) for _, address in recipients]
    with get_connection() as connection:
        return connection.send_messages(messages) or 0


def _webhooks(request: ConfirmationRequest, event: str) -> int:
    """Start one delivery of `event` about `request` to each active endpoint of its tenant."""
    endpoints = list(WebhookEndpoint.objects.filter(tenant_id=request.tenant_id, is_active=True).order_by("pk"))
    for endpoint in endpoints:
        message_id = uuid.uuid4()
        body = content.request_document(request, event=event, message_id=message_id)
        dispatch(deliver_webhook, endpoint.pk, str(message_id), event, str(request.pk), body)
    return len(endpoints)


def notify_approvers(*, request_id: uuid.UUID | str) -> dict[str, int]:
    """Tell the people who may decide `request_id` that it waits for them (email) and the tenant's
    relays (webhook `approval.requested`). Nothing when the request no longer waits for approvers
    (decided meanwhile, expired, requester-confirmed). Users without an email address are skipped.

    Returns {"emails": messages sent, "webhooks": deliveries started}.
    """
    request = _load(request_id)
    if (request is None or request.policy != ConfirmationRequest.Policy.APPROVERS
            or request.status != Status.PENDING):
        return {"emails": 0, "webhooks": 0}
    body = content.request_document(request, event=content.REQUESTED)
    recipients = [(u.get_username(), u.email) for u in selectors.deciders_of(request) if u.email]
    subject, text = content.approver_email(body)
    sent = _send_emails(recipients, subject, text)
    webhooks = _webhooks(request, content.REQUESTED)
    logger.info("request %s: approvers told (%d emails, %d webhooks)", request.pk, sent, webhooks)
    return {"emails": sent, "webhooks": webhooks}


def notify_requester(*, request_id: uuid.UUID | str) -> dict[str, int]:
    """Tell the requester of an approver-gated request how it was decided: approved (quorum
    reached), rejected (with the approver's reason) or expired (email), and the tenant's relays
    (webhook `approval.decided`). Requester-confirmed requests (the requester decided them) and
    other endings (superseded, the run cancelled) send nothing.

    Returns {"emails": messages sent, "webhooks": deliveries started}.
    """
    request = _load(request_id)
    if request is None or request.policy != ConfirmationRequest.Policy.APPROVERS:
        return {"emails": 0, "webhooks": 0}
    decided = request.status in (Status.CONFIRMED, Status.CONSUMED, Status.EXPIRED, Status.REFUSED) or (
        request.status == Status.CANCELLED and request.outcome_code != "RUN_ENDED")
    if not decided:
        return {"emails": 0, "webhooks": 0}
    body = content.request_document(request, event=content.DECIDED)
    subject, text = content.requester_email(body)
    recipients = [(request.user.get_username(), request.user.email)] if request.user.email else []
    sent = _send_emails(recipients, subject, text)
    webhooks = _webhooks(request, content.DECIDED)
    return {"emails": sent, "webhooks": webhooks}
