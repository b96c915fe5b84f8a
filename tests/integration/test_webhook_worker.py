"""Notifications through a real Celery worker: a request that needs approvers is
told by the worker (emails through the console backend, into the worker's log) and its webhook is
retried by Celery with backoff until the receiver answers 2xx; every attempt is a row."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from approvals.models import ConfirmationRequest
from notifications import signing
from notifications.models import WebhookDelivery, WebhookEndpoint
from tests.integration.conftest import wait_for
from tests.notifications.receiver import Receiver

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

Outcome = WebhookDelivery.Outcome


def test_a_worker_emails_the_approvers_and_retries_the_webhook_with_backoff(start_worker, requester, settings):
    worker = start_worker(env={"WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true", "WEBHOOK_RETRY_BACKOFF": "1",
                               "WEBHOOK_RETRY_BACKOFF_MAX": "2", "WEBHOOK_MAX_RETRIES": "3",
                               "LOG_FORMAT": "text", "LOG_LEVEL": "INFO"})
    with Receiver() as receiver:
        receiver.script([502, 503, 200])
        endpoint = WebhookEndpoint.objects.create(tenant=requester.tenant, name="relay", url=receiver.url)

        outcome = services.chat_send(user=requester, message="Refund A202607290003 amount 50 because it broke")
        request = ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)

        rows = wait_for(lambda: (list(WebhookDelivery.objects.order_by("attempt"))
                                 if WebhookDelivery.objects.filter(outcome=Outcome.SUCCEEDED).exists() else None),
                        message="the webhook to succeed", details=worker.tail)
        assert [(r.attempt, r.outcome, r.response_status, r.retry_in_seconds) for r in rows] == [
            (1, Outcome.RETRYING, 502, 1), (2, Outcome.RETRYING, 503, 2), (3, Outcome.SUCCEEDED, 200, None)]
        # Celery waited the backoff between attempts (countdown 1 s, then 2 s)
        assert (rows[1].created_at - rows[0].created_at).total_seconds() >= 0.9
        assert (rows[2].created_at - rows[1].created_at).total_seconds() >= 1.9
        assert all(signing.verify(secret=endpoint.secret, timestamp=got.headers["x-agentplatform-timestamp"],
                                  body=got.body, signature=got.headers["x-agentplatform-signature"])
                   for got in receiver.received)
        assert {r.confirmation_id for r in rows} == {request.pk}

    log = wait_for(lambda: worker.log() if "acme-approver2@example.com" in worker.log() else None,
                   message="the approvers' emails in the worker's log", details=worker.tail)
    assert "To: acme-approver1@example.com" in log and "To: acme-approver2@example.com" in log
    assert "To: acme-requester@example.com" not in log
    assert endpoint.secret not in log and "/hooks/approvals" not in log
