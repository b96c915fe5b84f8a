"""Delivering one webhook: one signed POST to one endpoint, logged as one WebhookDelivery row
(`webhook_attempt`), and the Celery task that retries it with exponential backoff
(`deliver_webhook`).

Not `acks_late`: a delivery is not idempotent for every receiver, so a worker that dies mid-task
loses that attempt rather than sending it twice; receivers drop duplicates by
X-Agentplatform-Delivery anyway (docs/notifications.md). Nothing here runs inside a transaction
(network calls); each attempt's row is written in autocommit.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx2
from celery import shared_task
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection

from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from notifications.urlcheck import host_of, validate_webhook_url

logger = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 425, 429}) | frozenset(range(500, 600))


def _post(url: str, headers: dict[str, str], data: bytes) -> httpx2.Response:
    """One POST, no redirects followed (a redirect could lead to an address the check refused)."""
    with httpx2.Client(timeout=settings.WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False) as client:
        return client.post(url, headers=headers, content=data)


def webhook_attempt(*, endpoint_id: int, message_id: str, event: str, confirmation_id: str | None,
                    body: dict[str, Any], attempt: int, retry_in: int | None) -> WebhookDelivery | None:
    """POST `body` to the endpoint once, signed with its secret, and log the attempt.

    attempt: 1 for the first try. retry_in: seconds until the next attempt if this one fails in a
    retryable way (5xx, 408/425/429, timeout, connection error, name not resolving); None when it
    is the last. Returns the WebhookDelivery row written: SUCCEEDED (2xx), RETRYING (retryable and
    retry_in is set), FAILED (anything else: 3xx/4xx, a refused address, the last retry);
    None when the endpoint is gone or inactive (nothing sent).
    """
    endpoint = WebhookEndpoint.objects.filter(pk=endpoint_id, is_active=True).first()
    if endpoint is None:
        return None
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": "agentplatform-webhooks/1",
        EVENT_HEADER: event,
        DELIVERY_HEADER: message_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret=endpoint.secret, timestamp=timestamp, body=data),
    }
    started = time.monotonic()
    status_code, error, retryable = None, "", False
    try:
        validate_webhook_url(endpoint.url)  # again now: DNS may point elsewhere than when it was saved
        response = _post(endpoint.url, headers, data)
        status_code = response.status_code
        retryable = status_code in RETRYABLE_STATUSES
        if not 200 <= status_code < 300:
            error = f"HTTP {status_code}"
    except ValidationError as exc:
        error = "; ".join(exc.messages)[:300]
        retryable = exc.code == "WEBHOOK_URL_UNRESOLVABLE"
    except httpx2.TimeoutException:
        error, retryable = f"timed out after {settings.WEBHOOK_TIMEOUT_SECONDS:g} s", True
    except httpx2.HTTPError as exc:
        error, retryable = f"{type(exc).__name__}: connection failed", True
    duration_ms = int((time.monotonic() - started) * 1000)
    if status_code is not None and 200 <= status_code < 300:
        outcome = WebhookDelivery.Outcome.SUCCEEDED
    elif retryable and retry_in is not None:
        outcome = WebhookDelivery.Outcome.RETRYING
    else:
        outcome = WebhookDelivery.Outcome.FAILED
    row, _ = WebhookDelivery.objects.get_or_create(
        message_id=message_id, attempt=attempt,
        defaults={"tenant_id": endpoint.tenant_id, "endpoint": endpoint, "event": event,
                  "confirmation_id": confirmation_id, "outcome": outcome, "response_status": status_code,
                  "error": error, "duration_ms": duration_ms, "body": body,
                  "retry_in_seconds": retry_in if outcome == WebhookDelivery.Outcome.RETRYING else None})
    log = logger.info if outcome == WebhookDelivery.Outcome.SUCCEEDED else logger.warning
    log("webhook %s %s to %s: attempt %d %s%s", event, message_id, host_of(endpoint.url), attempt, outcome,
        f" ({error})" if error else "")
    return row


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
        row = webhook_attempt(endpoint_id=endpoint_id, message_id=message_id, event=event,
                              confirmation_id=confirmation_id, body=body, attempt=retries + 1,
                              retry_in=retry_in)
        if row is None:
            return "SKIPPED"
        if row.outcome != WebhookDelivery.Outcome.RETRYING:
            return row.outcome
        if not self.request.is_eager:
            raise self.retry(countdown=retry_in)  # a worker takes the next attempt after the countdown
        # Eagerly (no broker: a notification thread of the web process) nobody else would wait the
        # backoff, so this attempt waits it and tries again itself, without holding a database
        # connection meanwhile (the next attempt's query takes one again).
        if not connection.in_atomic_block:
            connection.close()
        _wait(retry_in)
        retries += 1
