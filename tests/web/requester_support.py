"""Gated calls made over MCP for the requester-page tests (web and browser): built through the
governed pipeline with the ToolContext the MCP service builds (the key's conversation, no run, the
channel on every audit row), so the via-MCP mark is read from real audit rows."""
from __future__ import annotations

import uuid

from django.urls import reverse

from approvals.models import ConfirmationRequest
from tests.tools.support import assistant
from tools.context import ToolContext
from tools.manager import ToolCallingManager

KEY_NAME = "ci-agent"
MCP_CHANNEL = {"name": "mcp", "api_key": KEY_NAME, "api_key_id": "8c1d0d2e", "client": "pytest-client/1.0"}


def page_url(request: ConfirmationRequest | str | uuid.UUID) -> str:
    """The requester's page of `request` (a request or its id)."""
    request_id = request.pk if isinstance(request, ConfirmationRequest) else request
    return reverse("approvals:mine-detail", kwargs={"request_id": request_id})


def mcp_context(user) -> ToolContext:
    """The context of a call of `user`'s key KEY_NAME over MCP."""
    return ToolContext(tenant=user.tenant, user=user, conversation_id=uuid.uuid5(uuid.NAMESPACE_URL, KEY_NAME),
                       request_id="mcp-test", channel=dict(MCP_CHANNEL))


def mcp_call(user, tool: str, arguments: dict, *, call_id: str = "mcp_0001", confirmation=None):
    """One call over MCP through the governed pipeline; with `confirmation` (a request id), the
    client's retry that consumes it. Returns the CallOutcome (`.pending` when it waits)."""
    ctx = mcp_context(user)
    if confirmation is not None:
        ctx = ctx.with_confirmations({call_id: confirmation})
    return ToolCallingManager().execute_tool_calls(ctx, assistant((call_id, tool, arguments))).outcomes[0]
