"""The MCP server at /mcp/: the SDK's lowlevel `Server` with `tools/list` and `tools/call`, both as
the API key's user (agentplatform.mcp_server.asgi_app authenticated the request before any MCP
message was read; the Principal travels in the ASGI scope).

`tools/call` runs `calls.call_tool` (the governed pipeline) in a worker thread and maps its Answer:
completed → `structuredContent` (the masked result data) plus a text; failed → a tool error
(`isError`) whose `structuredContent` is `{code, message}`; pending → a non-error result whose
`structuredContent` is `{"status": "pending", ...}` and whose text says how to decide and to retry
the same call. A call waiting on its own requester is first offered as an elicitation form when
the client declared the capability (agentplatform.mcp_server.elicit); a 2025-11-25 client may ask for a
task instead (agentplatform.mcp_server.task_handlers). JSON-RPC errors carry a stable `error.data.code`.
"""
from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentplatform.mcp_server import sessions, task_handlers
from agentplatform.mcp_server.http_errors import ERROR_CODES
from agentplatform.mcp_server.listing import offered_listing
from agentplatform.mcp_server.replies import answer_result, principal_of, run_call
from agentplatform.mcp_server.threads import in_thread


INSTRUCTIONS = (
    "Governed tools of the platform, run as your API key's user. A call that needs a person's decision "
    "returns at once with structuredContent.status = \"pending\" (request id, quorum, expiry, the URL "
    "where it is decided). Retry the same call with the same arguments after the decision: the first retry "
    "after approval runs it once; a retry before answers pending again and never creates a second request.")


async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
                     ) -> types.ListToolsResult:
    """tools/list: everything offered to the key's user now (no pagination: one page)."""
    principal = principal_of(ctx)
    listed = await in_thread(offered_listing, principal.user)
    sessions.listed(ctx, principal, listed)
    return types.ListToolsResult(tools=listed)


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    """tools/call through the governed pipeline as the key's user (agentplatform.mcp_server.replies)."""
    return answer_result(await run_call(ctx, params))


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
    """The lowlevel Server advertising `tools.listChanged` (the session watcher sends it) and, for
    2025-11-25 clients, task-augmented `tools/call` (agentplatform.mcp_server.task_handlers)."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                      extensions: dict[str, dict[str, Any]] | None = None) -> Any:
        options = super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions)
        options.capabilities.tasks = task_handlers.CAPABILITY
        return options


def build_server() -> GovernedServer:
    """A new MCP Server with the platform's handlers, the error-code middleware and, inside it, the
    tasks middleware (innermost, so the SDK's OpenTelemetry middleware still sees the final error)."""
    server = GovernedServer("agentplatform", version="1", title="agentplatform governed tools",
                            instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware.append(error_codes)
    task_handlers.install(server)
    return server
