"""Fixtures of the API tests: clients authenticated the way programs are (an API token issued by
the same service the management command uses), and runs built through the chat service."""
from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.runtime import services
from agentplatform.runtime.outcome import RunOutcome

CANCEL_ORDER = "A202607290001"  # acme, PAID
SHIPPED_ORDER = "A202607290002"  # acme, SHIPPED
REFUND_ORDER = "A202607290003"  # acme, PAID


def authorization_header(user) -> str:
    """The `Authorization` header value a program sends as `user` (the one place tests build it)."""
    return f"Token {api_token_issue(user=user)}"


@pytest.fixture
def api() -> Callable[..., APIClient]:
    """api(user) -> an APIClient sending `user`'s API credentials; api() -> anonymous."""

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.credentials(HTTP_AUTHORIZATION=authorization_header(user))
        return client

    return make


@pytest.fixture
def cancel_pending(requester) -> RunOutcome:
    """A run of the requester waiting for their confirmation to cancel CANCEL_ORDER (HIGH risk)."""
    outcome = services.chat_send(user=requester, message=f"Please cancel order {CANCEL_ORDER} because it is late")
    assert outcome.pending and outcome.pending[0].needs == "requester" and outcome.pending[0].token
    return outcome


@pytest.fixture
def refund_pending(requester) -> RunOutcome:
    """A run of the requester waiting for two approvers to refund REFUND_ORDER (CRITICAL risk)."""
    outcome = services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it arrived damaged")
    assert outcome.pending and outcome.pending[0].needs == "approvers" and outcome.pending[0].quorum == 2
    return outcome


def assert_error(response, status: int, code: str, *, retryable: bool = False) -> dict:
    """The response is the one error body with this status and code. Returns the body."""
    assert response.status_code == status, (response.status_code, getattr(response, "content", b"")[:500])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    assert body["retryable"] is retryable
    return body
