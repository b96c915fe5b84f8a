"""Helpers of the MCP call service tests (agentplatform.mcp_server.calls), at the service level (no
HTTP): a principal made of a persona and a real API key, the demo catalog's tools by risk, and
readers for the side effects and audit rows a call leaves.

The demo seed's personas (tests/conftest.py `people`): acme's requester holds use_tool on every
catalog tool; approver1 and approver2 approve cancel_order and refund_order; globex is the other
tenant. Tools: list_orders LOW (runs at once), cancel_order HIGH (the requester confirms),
refund_order CRITICAL (two approvers). Fixtures are imported by the test modules.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from agentplatform.api.models import ApiKey
from agentplatform.mcp_server.calls import Principal
from agentplatform.tenancy.credentials import api_token_issue
from audit.models import AuditEvent

LOW, HIGH, CRITICAL = "list_orders", "cancel_order", "refund_order"
ORDER = "A202607290001"  # acme, PAID
REFUND_ORDER = "A202607290003"  # acme, PAID
CANCEL_ARGS = {"order_id": ORDER, "reason": "customer changed their mind"}
REFUND_ARGS = {"order_id": REFUND_ORDER, "amount": "10", "reason": "the parcel arrived broken"}
KEY_NAME = "ide-assistant"


def principal_of(user, *, name: str = KEY_NAME, client: str = "test-client/1.0") -> tuple[Principal, str]:
    """A Principal for `user` with a freshly issued API key named `name`. Returns (principal, the
    raw key), so a test can check the key itself never reaches a stored row."""
    raw = api_token_issue(user=user, name=name)
    key = ApiKey.objects.filter(user=user, name=name).order_by("-created").first()
    return Principal(user=user, api_key=key, client=client), raw


@pytest.fixture
def caller(requester) -> Principal:
    """acme's requester calling through the key KEY_NAME."""
    return principal_of(requester)[0]


@pytest.fixture
def keyed(requester) -> tuple[Principal, str]:
    """(acme's requester's principal, its raw key)."""
    return principal_of(requester)


def rows_of(tool_call_id: str) -> list[AuditEvent]:
    """The audit rows of one MCP call (by its tool_call_id), oldest first."""
    return list(AuditEvent.objects.filter(tool_call_id=tool_call_id).order_by("occurred_at", "id"))


def stored_text() -> str:
    """Every audit row's fields as one text (to look for what must never be stored)."""
    return json.dumps(list(AuditEvent.objects.values()), default=str)


def code(answer: Any) -> str:
    """The answer's result code."""
    return answer.result["code"]
