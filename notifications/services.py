"""Notifications about approval requests (issue 13 item 5; docs/notifications.md).

- `notify_approvers`: a request waits for approvers -> an email to each person who may decide it
  (approvals.selectors.deciders_of: same tenant, `approve_tool` on its tool, not the requester, not
  yet decided) and an `approval.requested` webhook to each active endpoint of its tenant.
- `notify_requester`: an approver-gated request was approved (quorum reached), rejected or
  expired -> an email to its requester and an `approval.decided` webhook.
- `webhook_attempt`: one signed POST to one endpoint, logged as one WebhookDelivery row.

None of these runs inside a transaction (network calls; STYLE rule 2): the receivers start them
after the deciding transaction committed, through `dispatch` (a Celery task with a broker; without
one a daemon thread of this process, so no person's request waits for a slow relay).
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

import httpx2
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.db import close_old_connections, connections

from approvals import selectors
from approvals.models import ConfirmationRequest
from notifications import content
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from notifications.urlcheck import host_of, validate_webhook_url

logger = logging.getLogger(__name__)

Status = ConfirmationRequest.Status
# Without a broker, notification work runs in a daemon thread (False: in the caller's thread,
# which tests use to stay deterministic).
EAGER_IN_THREAD = True
_threads: list[threading.Thread] = []


def dispatch(task, *args: Any) -> None:
    """Run Celery `task` with `args` away from the caller: enqueued with a broker; eagerly (no
    broker) in a daemon thread of this process (or inline when EAGER_IN_THREAD is False). A
    failure to enqueue is logged, never raised: the decision that caused it stands."""
    try:
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            task.delay(*args)
            return
        if not EAGER_IN_THREAD:
            task.apply(args=list(args), throw=False)
            return

        def run() -> None:
            try:
                task.apply(args=list(args), throw=False)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run, name=f"agentplatform-notify-{task.name}", daemon=True)
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
        thread.start()
    except Exception:  # noqa: BLE001 - a notification never undoes a decision
        logger.exception("notification task %s was not started", getattr(task, "name", task))


def join_notifications(timeout: float = 30.0) -> None:
    """Wait for the eager notification threads started so far (tests, the demo)."""
    for thread in list(_threads):
        thread.join(timeout)
    close_old_connections()


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
    from notifications.tasks import deliver_webhook

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


# -- one webhook attempt ------------------------------------------------------------------------

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
