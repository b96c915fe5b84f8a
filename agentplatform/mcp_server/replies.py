"""What the MCP server answers a tools/call: who calls (the Principal asgi_app resolved, with the
client's clientInfo), the governed call run in a worker thread (with the requester's elicitation
form where usable), and the mapping of its Answer to a CallToolResult: completed → structuredContent
(the masked result data) plus a text; failed → a tool error whose structuredContent is {code,
message}; pending → a non-error result with {"status": "pending", ...} and a text that says how to
decide and to retry the same call.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentplatform.mcp_server import calls, elicit, sessions
from agentplatform.mcp_server.threads import in_thread
from tools.errors import ToolPermissionDenied

# The ASGI scope keys asgi_app fills for every authenticated request.
PRINCIPAL_KEY = "agentplatform.mcp.principal"
REQUEST_ID_KEY = "agentplatform.mcp.request_id"


def principal_of(ctx: ServerRequestContext[Any, Any]) -> calls.Principal:
    """The Principal asgi_app resolved for the HTTP request carrying this message, with the client's
    clientInfo "name/version" once the handshake declared it. Raises MCPError INTERNAL_ERROR when
    the request did not pass through asgi_app (never served unauthenticated)."""
    request = ctx.request
    principal = request.scope.get(PRINCIPAL_KEY) if request is not None else None
    if principal is None:
        raise MCPError(code=-32603, message="unauthenticated message", data={"code": "INTERNAL_ERROR"})
    client_params = ctx.session.client_params
    if client_params is not None and not principal.client:
        info = client_params.client_info
        principal = replace(principal, client=f"{info.name}/{info.version}"[:200])
    return principal


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def completed_result(answer: calls.Answer) -> types.CallToolResult:
    """A completed Answer: structuredContent = the masked result data (an object; other JSON is
    wrapped as {"value": ...}), text = the whole masked envelope (success, code, message, data)."""
    data = answer.result.get("data")
    structured = data if isinstance(data, dict) else {"value": data}
    text = _text(answer.result)
    meta: dict[str, Any] = {}
    if answer.edited:
        # An approver's edit reaches the client truthfully: what ran is not what was asked.
        text = f"An approver changed the arguments before it ran: {_text(answer.edited)}\n{text}"
        meta["agentplatform/edited"] = answer.edited
    if answer.replayed:  # the stored result of the one execution; nothing ran again
        meta["agentplatform/replayed"] = True
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured,
                                is_error=False, _meta=meta or None)


def failed_result(code: str, message: str, *, replayed: bool = False, **extra: Any) -> types.CallToolResult:
    """A tool error: isError, structuredContent {code, message, ...extra (None values left out)},
    text "CODE: message"; `_meta["agentplatform/replayed"]` when it is the stored answer of a call
    that already ended (structuredContent stays the same as the first answer's)."""
    structured = {"code": code, "message": message, **{k: v for k, v in extra.items() if v is not None}}
    return types.CallToolResult(content=[types.TextContent(text=f"{code}: {message}")],
                                structured_content=structured, is_error=True,
                                _meta={"agentplatform/replayed": True} if replayed else None)


def pending_result(answer: calls.Answer) -> types.CallToolResult:
    """A call waiting for a decision: not an error; structuredContent {"status": "pending", the
    pending facts, "call_id"}; the text says who decides, where, and to retry the same call."""
    pending = dict(answer.pending or {})
    structured = {"status": "pending", **pending}
    if answer.call_id is not None:
        structured["call_id"] = str(answer.call_id)
    who = "you (the requester) must confirm it" if pending.get("needs") == "requester" else (
        f"{pending.get('quorum', '?')} approver(s) must approve it ({pending.get('approvals', 0)} so far)")
    text = (f"Pending, not run: {pending.get('summary', '')} — {who}. Decide at {pending.get('url', '')} "
            f"(request {pending.get('request_id', '')}, expires {pending.get('expires_at', '')}). "
            "Then retry this same call with the same arguments: it runs once and returns the result. "
            "A retry before the decision answers pending again; it never creates a second request.")
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured,
                                is_error=False)


def answer_result(answer: calls.Answer) -> types.CallToolResult:
    """The CallToolResult of an Answer (completed, failed or pending)."""
    if answer.state == "completed":
        return completed_result(answer)
    if answer.state == "pending":
        return pending_result(answer)
    result = answer.result or {}
    data = result.get("data") if isinstance(result.get("data"), dict) else {}
    # Who decided and why (masked, as our own loop tells the model), and whether this is the stored
    # answer of a call that already ended.
    return failed_result(str(result.get("code") or "TOOL_EXECUTION_FAILED"), str(result.get("message") or ""),
                         retryable=result.get("retryable"), reason=data.get("reason"),
                         decided_by=data.get("decided_by"), replayed=answer.replayed)


async def run_call(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams, *,
                   elicit_now: bool = True) -> calls.Answer:
    """Run one tools/call through the governed pipeline as the key's user (arguments absent = {});
    with elicit_now, a call waiting on its requester is first offered as a form where usable. A tool
    the user may not use answers a failed PERMISSION_DENIED Answer (audited by the pipeline)."""
    principal = principal_of(ctx)
    sessions.touched(ctx, principal)
    request_id = str(ctx.request.scope.get(REQUEST_ID_KEY, "")) if ctx.request is not None else ""
    arguments = params.arguments if params.arguments is not None else {}
    try:
        answer = await in_thread(calls.call_tool, principal, name=params.name, arguments=arguments,
                                 request_id=request_id)
    except ToolPermissionDenied:
        return calls.Answer(state="failed", result={"success": False, "code": "PERMISSION_DENIED",
                                                    "message": "you may not use this tool", "data": None})
    if elicit_now and answer.waits_on_requester and elicit.usable(ctx):
        answer = await elicit.confirm(ctx, principal, answer)
    return answer
