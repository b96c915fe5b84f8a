"""Sending notices once: each email and each webhook delivery is claimed in the ledger
(notifications.ledger) before it goes out, so a repeated signal, a retried task or a concurrent
sender never tells the same person or endpoint the same thing twice.

Nothing here runs inside a transaction (mail servers and relays are network calls); each claim is
its own autocommit statement.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from approvals.models import ConfirmationRequest
from notifications import content, ledger
from notifications.delivery import deliver_webhook
from notifications.dispatch import dispatch
from notifications.models import Notice, WebhookEndpoint

logger = logging.getLogger(__name__)

Kind = Notice.Kind
# Which notice kind a webhook event is recorded as.
EVENT_KIND = {content.REQUESTED: Kind.REQUESTED, content.REVISED: Kind.REVISED,
              content.RETRACTED: Kind.RETRACTED, content.DECIDED: Kind.DECIDED}


def load(request_id: uuid.UUID | str | None) -> ConfirmationRequest | None:
    """The request with what notices read (tenant, requester, tool, decider); None when unknown."""
    if not request_id:
        return None
    return (ConfirmationRequest.objects.select_related("tenant", "user", "tool", "decided_by")
            .filter(pk=request_id).first())


def email_each(*, request: ConfirmationRequest, kind: str, people: Iterable,
               write: Callable[[Any], tuple[str, str]]) -> int:
    """Email each of `people` (users; those without an address are skipped) the notice `kind`
    about `request` (its current revision), once: a person whose notice was claimed before is
    skipped. write(user) -> (subject, text) of that person's message. One message per person
    (nobody sees who else was told). A mail server's failure is logged and recorded on the claims
    (`Notice.error`), never raised. Returns the messages sent."""
    if not settings.NOTIFY_EMAIL:
        return 0
    claimed, messages = [], []
    for user in people:
        if not user.email or not ledger.claim(request=request, kind=kind, revision=request.revision,
                                              recipient_id=user.pk):
            continue
        subject, text = write(user)
        claimed.append(user.pk)
        messages.append(EmailMessage(subject=subject, body=text, to=[user.email]))
    if not messages:
        return 0
    try:
        with get_connection() as connection:
            sent = connection.send_messages(messages) or 0
    except Exception as exc:  # noqa: BLE001 - a mail server's failure is recorded, never retried twice
        logger.warning("request %s: %d %s emails not sent (%s)", request.pk, len(messages), kind, type(exc).__name__)
        ledger.settle(request=request, kind=kind, revision=request.revision, recipient_ids=claimed,
                      error=f"{type(exc).__name__}: not sent")
        return 0
    ledger.settle(request=request, kind=kind, revision=request.revision, recipient_ids=claimed)
    return sent


def webhooks_once(request: ConfirmationRequest, event: str, extra: dict[str, Any] | None = None,
                  kind: str | None = None) -> int:
    """Start one delivery of `event` about `request` to each active endpoint of its tenant that
    was not sent this notice `kind` (default: the event's) about this revision before. Returns the
    deliveries started."""
    started = 0
    kind = kind or EVENT_KIND[event]
    for endpoint in WebhookEndpoint.objects.filter(tenant_id=request.tenant_id, is_active=True).order_by("pk"):
        if not ledger.claim(request=request, kind=kind, revision=request.revision, endpoint_id=endpoint.pk):
            continue
        message_id = uuid.uuid4()
        body = content.request_document(request, event=event, message_id=message_id, extra=extra)
        dispatch(deliver_webhook, endpoint.pk, str(message_id), event, str(request.pk), body)
        ledger.settle(request=request, kind=kind, revision=request.revision, endpoint_id=endpoint.pk)
        started += 1
    return started
