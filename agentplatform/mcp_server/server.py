"""The MCP server at /mcp/: the SDK's lowlevel `Server` with `tools/list` and `tools/call`, both as
the API key's user (agentplatform.mcp_server.asgi_app authenticated the request before any MCP
message was read; the Principal travels in the ASGI scope).

`tools/call` runs `calls.call_tool` (the governed pipeline) in a worker thread and maps its Answer:
completed → `structuredContent` (the masked result data) plus a text; failed → a tool error
(`isError`) whose `structuredContent` is `{code, message}`; pending → a non-error result whose
`structuredContent` is `{"status": "pending", ...}` and whose text says how to decide and to retry
the same call. A call waiting on its own requester is first offered as an elicitation form when
the client declared the capability (agentplatform.mcp_server.elicit). JSON-RPC errors carry a stable
`error.data.code`.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentplatform.mcp_server import calls, elicit, sessions
from agentplatform.mcp_server.listing import offered_listing
from agentplatform.mcp_server.threads import in_thread
from tools.errors import ToolPermissionDenied

# The ASGI scope keys asgi_app fills for every authenticated request.
PRINCIPAL_KEY = "agentplatform.mcp.principal"
REQUEST_ID_KEY = "agentplatform.mcp.request_id"

# JSON-RPC error codes → the stable `error.data.code` every error carries.
ERROR_CODES = {-32700: "PARSE_ERROR", -32600: "INVALID_REQUEST", -32601: "METHOD_NOT_FOUND",
               -32602: "INVALID_PARAMS", -32603: "INTERNAL_ERROR"}

INSTRUCTIONS = (
    "Governed tools of the platform, run as your API key's user. A call that needs a person's decision "
    "returns at once with structuredContent.status = \"pending\" (request id, quorum, expiry, the URL "
    "where it is decided). Retry the same call with the same arguments after the decision: the first retry "
    "after approval runs it once; a retry before answers pending again and never creates a second request.")


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
    meta = None
    if answer.edited:
        # An approver's edit reaches the client truthfully: what ran is not what was asked.
        text = f"An approver changed the arguments before it ran: {_text(answer.edited)}\n{text}"
        meta = {"agentplatform/edited": answer.edited}
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured,
                                is_error=False, _meta=meta)


def failed_result(code: str, message: str, **extra: Any) -> types.CallToolResult:
    """A tool error: isError, structuredContent {code, message, ...extra}, text "CODE: message"."""
    structured = {"code": code, "message": message, **{k: v for k, v in extra.items() if v is not None}}
    return types.CallToolResult(content=[types.TextContent(text=f"{code}: {message}")],
                                structured_content=structured, is_error=True)


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
    return failed_result(str(result.get("code") or "TOOL_EXECUTION_FAILED"), str(result.get("message") or ""),
                         retryable=result.get("retryable"))


async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
                     ) -> types.ListToolsResult:
    """tools/list: everything offered to the key's user now (no pagination: one page)."""
    principal = principal_of(ctx)
    listed = await in_thread(offered_listing, principal.user)
    sessions.listed(ctx, principal, listed)
    return types.ListToolsResult(tools=listed)


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    """tools/call through the governed pipeline as the key's user. Arguments absent = {}."""
    principal = principal_of(ctx)
    sessions.touched(ctx, principal)
    request_id = str(ctx.request.scope.get(REQUEST_ID_KEY, "")) if ctx.request is not None else ""
    arguments = params.arguments if params.arguments is not None else {}
    try:
        answer = await in_thread(calls.call_tool, principal, name=params.name, arguments=arguments,
                                 request_id=request_id)
    except ToolPermissionDenied:
        # Audited by the pipeline before it propagated; the client hears the stable code only.
        return failed_result("PERMISSION_DENIED", "you may not use this tool")
    if answer.waits_on_requester and elicit.usable(ctx):
        answer = await elicit.confirm(ctx, principal, answer)
    return answer_result(answer)


async def error_codes(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: every JSON-RPC error leaves with `error.data.code` (a stable name), and
    an unexpected exception as INTERNAL_ERROR naming nothing of the server's internals."""
    try:
        return await call_next(ctx)
    except MCPError as error:
        data = error.data
        if isinstance(data, dict) and "code" in data:
            raise
        code = ERROR_CODES.get(error.code, "ERROR")
        raise MCPError(code=error.code, message=error.message,
                       data={"code": code, **({"detail": data} if data not in (None, "") else {})}) from error
    except ValidationError as error:
        fields = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in error.errors()[:20]]
        raise MCPError(code=-32602, message="Invalid request parameters",
                       data={"code": "INVALID_PARAMS", "errors": fields}) from error
    except Exception as error:  # noqa: BLE001 - the one place an unexpected failure becomes an error body
        sessions.logger.exception("MCP %s failed", ctx.method)
        raise MCPError(code=-32603, message="Internal error", data={"code": "INTERNAL_ERROR"}) from error


class GovernedServer(Server):
    """The lowlevel Server advertising `tools.listChanged` (the session watcher sends it)."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                      extensions: dict[str, dict[str, Any]] | None = None) -> Any:
        return super().create_initialization_options(notification_options or NotificationOptions(tools_changed=True),
                                                     experimental_capabilities, extensions)


def build_server() -> GovernedServer:
    """A new MCP Server with the platform's handlers and the error-code middleware (innermost, so
    the SDK's OpenTelemetry middleware still sees the final error)."""
    server = GovernedServer("agentplatform", version="1", title="agentplatform governed tools",
                            instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware.append(error_codes)
    return server
