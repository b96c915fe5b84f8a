"""Fixtures of the notification tests: approver-gated requests made through the real chat service,
a local webhook receiver, and webhook endpoints allowed to call it (loopback)."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from approvals.models import ConfirmationRequest
from notifications.models import WebhookEndpoint
from tests.notifications.receiver import Receiver

REFUND_ORDER = "A202607290003"
CANCEL_ORDER = "A202607290001"


@pytest.fixture
def make_refund(requester, django_capture_on_commit_callbacks):
    """`make_refund(user=requester, text=...)` -> a PENDING approver-gated refund (CRITICAL,
    quorum 2), its on-commit work (the notifications) run as it would after a real commit."""

    def make(user=None, text: str = f"Refund {REFUND_ORDER} amount 50 because it arrived broken"):
        with django_capture_on_commit_callbacks(execute=True):
            outcome = services.chat_send(user=user or requester, message=text)
        assert outcome.pending and outcome.pending[0].needs == "approvers"
        return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)

    return make


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


@pytest.fixture
def local_hooks(settings):
    """A local receiver is on loopback: allowed for these tests only, and retries wait nothing."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    settings.PLATFORM_BASE_URL = "https://approvals.example.com"


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The backoff waits the eager delivery would sleep, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr("notifications.delivery._wait", recorded.append)
    return recorded


@pytest.fixture
def endpoint(local_hooks, receiver, requester) -> WebhookEndpoint:
    """acme's endpoint, pointing at the local receiver."""
    return WebhookEndpoint.objects.create(tenant=requester.tenant, name="acme relay", url=receiver.url)
