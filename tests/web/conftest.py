"""Fixtures of the page tests: gated calls created through the real chat service (offline model)."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from approvals.models import ConfirmationRequest

REFUND_ORDER = "A202607290003"
CANCEL_ORDER = "A202607290001"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    """Seeding hashes ten demo passwords per test; a fast hasher keeps these tests quick (the
    hasher is not what they test)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def refund_request(requester) -> ConfirmationRequest:
    """A PENDING approver-gated refund (CRITICAL, quorum 2) asked by acme's requester."""
    outcome = services.chat_send(user=requester, message=f"Refund {REFUND_ORDER} amount 50 because it arrived broken")
    assert outcome.pending and outcome.pending[0].needs == "approvers"
    return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)


@pytest.fixture
def cancel_request(requester) -> ConfirmationRequest:
    """A PENDING requester-confirmed cancellation (HIGH): approvers may not decide it."""
    outcome = services.chat_send(user=requester, message=f"cancel {CANCEL_ORDER} because no longer needed")
    assert outcome.pending and outcome.pending[0].needs == "requester"
    return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)
