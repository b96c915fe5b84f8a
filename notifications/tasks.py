"""Celery tasks of notifications: thin wrappers around notifications.services.

Not `acks_late`: a notification is not idempotent (a second delivery is a second email), so a
worker that dies mid-task loses that notification rather than sending it twice; webhook receivers
drop duplicates by X-Agentplatform-Delivery anyway (docs/notifications.md).
"""
from __future__ import annotations

import time
from typing import Any

from celery import shared_task
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings

from notifications import services
from notifications.models import WebhookDelivery


@shared_task(name="notifications.notify_approvers", ignore_result=True)
def notify_approvers(request_id: str) -> dict[str, int]:
    """Email the people who may decide request `request_id` and start its webhooks."""
    return services.notify_approvers(request_id=request_id)


@shared_task(name="notifications.notify_requester", ignore_result=True)
def notify_requester(request_id: str) -> dict[str, int]:
    """Email the requester how request `request_id` was decided and start its webhooks."""
    return services.notify_requester(request_id=request_id)


def backoff(retries: int) -> int:
    """Seconds before retry number `retries` + 1: WEBHOOK_RETRY_BACKOFF x 2**retries, capped at
    WEBHOOK_RETRY_BACKOFF_MAX (no jitter: the log then says exactly when the next attempt comes)."""
    return get_exponential_backoff_interval(factor=settings.WEBHOOK_RETRY_BACKOFF, retries=retries,
                                            maximum=settings.WEBHOOK_RETRY_BACKOFF_MAX, full_jitter=False)


def _wait(seconds: float) -> None:
    """The eager delivery's wait between attempts (tests record it instead of sleeping)."""
    time.sleep(seconds)


@shared_task(bind=True, name="notifications.deliver_webhook", ignore_result=True,
             max_retries=settings.WEBHOOK_MAX_RETRIES)
def deliver_webhook(self, endpoint_id: int, message_id: str, event: str, confirmation_id: str | None,
                    body: dict[str, Any]) -> str:
    """One attempt to deliver `body` to endpoint `endpoint_id`; on a retryable failure (5xx,
    429, timeout, connection error) Celery retries it after `backoff(retries)` seconds, at most
    WEBHOOK_MAX_RETRIES times. Every attempt is a WebhookDelivery row (admin: Notifications).
    Returns the attempt's outcome (SUCCEEDED, RETRYING, FAILED) or "SKIPPED" (endpoint gone).
    """
    retries = self.request.retries
    while True:
        retry_in = backoff(retries) if retries < self.max_retries else None
        row = services.webhook_attempt(endpoint_id=endpoint_id, message_id=message_id, event=event,
                                       confirmation_id=confirmation_id, body=body, attempt=retries + 1,
                                       retry_in=retry_in)
        if row is None:
            return "SKIPPED"
        if row.outcome != WebhookDelivery.Outcome.RETRYING:
            return row.outcome
        if not self.request.is_eager:
            raise self.retry(countdown=retry_in)  # a worker takes the next attempt after the countdown
        # Eagerly (no broker: the delivery thread of the web process) nobody else would wait the
        # backoff, so this attempt waits it and tries again itself.
        _wait(retry_in)
        retries += 1
