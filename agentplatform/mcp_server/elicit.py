"""The requester's own confirmation of a HIGH call as an MCP elicitation form.

When a call waits on its requester, the client declared the `elicitation` capability (form mode)
and MCP_CONFIRM_BY_ELICITATION is on, the server asks the client's user with a form (the call's
summary and one boolean `confirm`) on the same request's stream, and answers with what the
requester chose (calls.requester_answer): confirmed → the call runs once; declined or dismissed →
the request is cancelled (a tool error). No answer within MCP_ELICITATION_TIMEOUT_SECONDS, a client
that cannot receive server requests on this connection (JSON responses, the 2026-07-28 stateless
protocol, another worker): the call answers "pending" and is decided on the request's page.
"""
from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from pydantic import ValidationError

from agentplatform.mcp_server import calls
from agentplatform.mcp_server.threads import in_thread
from approvals.errors import ApprovalForbidden

logger = logging.getLogger(__name__)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Confirm / 确认",
                               "description": "Run this call now / 立即执行此操作"}},
    "required": ["confirm"],
}


def usable(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when a form may be sent now: the setting is on, this request's channel can carry a
    server request, and the client declared form elicitation (an `elicitation` object without
    modes means form, as before modes existed)."""
    if not settings.MCP_CONFIRM_BY_ELICITATION or not ctx.session.can_send_request:
        return False
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


def message(answer: calls.Answer) -> str:
    """The form's text: what will run, its risk, and where else it can be decided."""
    pending = answer.pending or {}
    return (f"Confirm this call? / 确认执行此操作？\n{pending.get('summary', '')}\n"
            f"Risk / 风险: {pending.get('risk', '')} · request / 请求 {pending.get('request_id', '')} · "
            f"{pending.get('url', '')}")


async def confirm(ctx: ServerRequestContext[Any, Any], principal: calls.Principal, answer: calls.Answer) -> calls.Answer:
    """Ask the requester with a form and return the Answer after their choice; `answer` itself
    (pending) when no choice came back in time or the client could not be asked."""
    if answer.call_id is None:
        return answer
    result: types.ElicitResult | None = None
    try:
        with anyio.move_on_after(settings.MCP_ELICITATION_TIMEOUT_SECONDS):
            result = await ctx.session.elicit_form(message(answer), SCHEMA, related_request_id=ctx.request_id)
    except (NoBackChannelError, MCPError, ValidationError) as error:
        logger.info("elicitation not answered (%s): the call stays pending", type(error).__name__)
        return answer
    if result is None:
        logger.info("elicitation timed out: the call stays pending")
        return answer
    # Outside the timeout: once the requester chose, their choice is recorded whatever the clock says.
    try:
        return await in_thread(calls.requester_answer, principal, call_id=answer.call_id, confirm=accepted(result))
    except ApprovalForbidden as refused:
        # A service account's key: a program never confirms for a person; the request stays open.
        return calls.Answer(state="failed", result={"success": False, "code": refused.code, "message": str(refused),
                                                    "data": None}, call_id=answer.call_id)


def accepted(result: types.ElicitResult) -> bool:
    """True when the form came back accepted with confirm = true."""
    return result.action == "accept" and (result.content or {}).get("confirm") is True
