"""Talking to an MCP server with the official `mcp` SDK (ClientSession over stdio or streamable
HTTP): list its tools, call one. One short session per operation, so nothing is shared between
tenants, runs or threads; no database access here (the caller passes a `ServerConfig`).

Credentials (headers, OAuth client secret, access tokens) are only put on the wire: never in a log
line, an exception message we raise, a ToolResult or an audit row.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import anyio
import httpx2
from django.core.cache import cache

from mcp_sources.schema import definition_hash

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    """What a session needs of an McpServer row (mcp_sources.models), read before going async."""

    pk: int
    name: str
    transport: str
    # Where the server is may carry a secret (a URL's query, a command's arguments): no repr shows it.
    url: str = field(default="", repr=False)
    command: str = field(default="", repr=False)
    args: tuple[str, ...] = field(default=(), repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    oauth_token_url: str = field(default="", repr=False)
    oauth_client_id: str = field(default="", repr=False)
    oauth_client_secret: str = field(default="", repr=False)
    oauth_scopes: str = ""
    timeout_seconds: float = 30.0

    @classmethod
    def of(cls, server: Any) -> "ServerConfig":
        return cls(pk=server.pk, name=server.name, transport=server.transport, url=server.url,
                   command=server.command, args=tuple(server.args or ()), env=dict(server.env or {}),
                   headers=dict(server.headers or {}), oauth_token_url=server.oauth_token_url,
                   oauth_client_id=server.oauth_client_id, oauth_client_secret=server.oauth_client_secret,
                   oauth_scopes=server.oauth_scopes, timeout_seconds=float(server.timeout_seconds))


@dataclass(frozen=True)
class RemoteTool:
    """One tool as listed: remote name, description, input schema, annotations, definition hash."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None
    hash: str


@dataclass(frozen=True)
class Listing:
    """The result of one discovery: negotiated protocol version, server identity, tools."""

    protocol_version: str
    server_name: str
    server_version: str
    tools: list[RemoteTool]


@dataclass(frozen=True)
class CallReply:
    """What became of one call.

    kind: "OK" (the server answered; `is_error` says whether the tool failed), "CHANGED" (the tool's
    definition no longer matches the reviewed hash: not called), "MISSING" (no longer listed: not
    called), "UNAVAILABLE" (failed before the request was sent: safe to retry later), "UNKNOWN"
    (failed or timed out after the request was sent: it may have run). list_changed: the server
    announced `notifications/tools/list_changed` during the session.
    """

    kind: str
    is_error: bool = False
    text: list[str] = field(default_factory=list)
    structured: Any = None
    error: str = ""
    list_changed: bool = False


class McpUnavailable(Exception):
    """The server could not be reached, refused us, or broke the protocol. The message is safe to
    show (an exception class name and, for HTTP, the status code; never a header or a token)."""


# -- OAuth client credentials --------------------------------------------------------------------

def _token_cache_key(config: ServerConfig) -> str:
    ident = hashlib.sha256(f"{config.oauth_token_url}|{config.oauth_client_id}|{config.oauth_scopes}".encode())
    return f"mcp-oauth:{config.pk}:{ident.hexdigest()[:16]}"


async def _access_token(config: ServerConfig, *, fresh: bool = False) -> str:
    """An access token for the server (OAuth 2.0 client credentials grant, RFC 6749 section 4.4),
    cached in the Django cache until 30 seconds before it expires and fetched again then (or when
    `fresh`, after a 401). Raises McpUnavailable when the token endpoint refuses."""
    key = _token_cache_key(config)
    if not fresh:
        token = await asyncio.to_thread(cache.get, key)
        if token:
            return token
    data = {"grant_type": "client_credentials"}
    if config.oauth_scopes:
        data["scope"] = config.oauth_scopes
    async with httpx2.AsyncClient(timeout=config.timeout_seconds) as client:
        response = await client.post(config.oauth_token_url, data=data,
                                     auth=(config.oauth_client_id, config.oauth_client_secret))
    if response.status_code != 200:
        raise McpUnavailable(f"the OAuth token endpoint answered {response.status_code}")
    body = response.json()
    token = str(body.get("access_token") or "")
    if not token:
        raise McpUnavailable("the OAuth token endpoint returned no access token")
    lifetime = int(body.get("expires_in") or 300)
    await asyncio.to_thread(cache.set, key, token, max(1, lifetime - 30))
    return token


# -- sessions ------------------------------------------------------------------------------------

@asynccontextmanager
async def _session(config: ServerConfig, on_list_changed: Callable[[], None]) -> AsyncIterator[Any]:
    """An initialized ClientSession to the server (protocol version negotiated by the SDK)."""
    # The MCP SDK is imported where a server is contacted, not at module import: it takes over a
    # second to import, and every process (web, worker, manage.py) imports this module at startup
    # through the tool registry's provider, while only the ones that call a remote tool need it.
    from mcp import ClientSession

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/tools/list_changed":
            on_list_changed()

    if config.transport == "stdio":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        # The child gets a minimal environment plus what the operator configured, not our secrets.
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "PYTHONPATH", "SYSTEMROOT") if k in os.environ}
        env.update(config.env)
        params = StdioServerParameters(command=config.command, args=list(config.args), env=env)
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    await session.initialize()
                    yield session
        return
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = dict(config.headers)
    if config.oauth_token_url:
        headers["Authorization"] = f"Bearer {await _access_token(config)}"
    client = create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(config.timeout_seconds))
    async with client:
        async with streamable_http_client(config.url, http_client=client) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                yield session


def _tool_of(tool: Any) -> RemoteTool:
    schema = dict(getattr(tool, "input_schema", None) or {})
    annotations = getattr(tool, "annotations", None)
    return RemoteTool(
        name=tool.name, description=tool.description or "", input_schema=schema,
        annotations=annotations.model_dump(mode="json", exclude_none=True) if annotations is not None else None,
        hash=definition_hash(name=tool.name, description=tool.description, input_schema=schema))


async def _list(session: Any) -> list[RemoteTool]:
    from mcp import types  # the SDK is imported only where a server is contacted (see _session)

    tools, cursor = [], None
    for _ in range(50):  # at most 50 pages
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        tools.extend(_tool_of(t) for t in result.tools)
        cursor = getattr(result, "next_cursor", None)
        if not cursor:
            break
    return tools


def _safe(error: BaseException) -> str:
    """A message about `error` fit for users and audit: its class, and an HTTP status if any."""
    leaves = _leaves(error)
    names = ", ".join(sorted({type(e).__name__ for e in leaves}))
    status = next((getattr(getattr(e, "response", None), "status_code", None) for e in leaves
                   if getattr(getattr(e, "response", None), "status_code", None)), None)
    return names + (f" (HTTP {status})" if status else "")


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in _leaves(e)]
    return [error]


def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """Run an async function to completion from synchronous code (in a worker thread when this
    thread already runs an event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn, *args)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, fn, *args).result()


def list_tools(config: ServerConfig) -> Listing:
    """Discover the server's tools (all pages) within its timeout.

    Returns a Listing. Raises McpUnavailable (unreachable, refused, timed out, protocol error)."""
    async def go() -> Listing:
        with anyio.fail_after(config.timeout_seconds):
            async with _session(config, lambda: None) as session:
                tools = await _list(session)
                info = session.server_info
                return Listing(protocol_version=str(session.protocol_version or ""),
                               server_name=getattr(info, "name", "") or "",
                               server_version=getattr(info, "version", "") or "", tools=tools)

    try:
        return _run(go)
    except BaseException as error:  # noqa: BLE001 - whatever the SDK or transport raised
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        raise McpUnavailable(f"discovery failed: {_safe(error)}") from None


def call_tool(config: ServerConfig, *, remote_name: str, arguments: dict[str, Any], reviewed_hash: str) -> CallReply:
    """Call one tool, at most once, within the server's timeout.

    In one session: list the tools and refuse (CHANGED / MISSING, nothing called) unless the tool's
    definition still hashes to `reviewed_hash`, so a server cannot swap a reviewed tool behind its
    name between discovery and the call; then send `tools/call` once. Never retries. Returns a
    CallReply (see there); raises nothing for a server's failure.
    """
    state = {"sent": False, "list_changed": False}

    def changed() -> None:
        state["list_changed"] = True

    async def go() -> CallReply:
        with anyio.fail_after(config.timeout_seconds):
            async with _session(config, changed) as session:
                listed = {t.name: t for t in await _list(session)}
                tool = listed.get(remote_name)
                if tool is None:
                    return CallReply("MISSING", list_changed=True)
                if tool.hash != reviewed_hash:
                    return CallReply("CHANGED", list_changed=True)
                state["sent"] = True
                result = await session.call_tool(remote_name, arguments)
                text = [getattr(block, "text", "") for block in result.content if getattr(block, "type", "") == "text"]
                return CallReply("OK", is_error=bool(result.is_error), text=text,
                                 structured=result.structured_content, list_changed=state["list_changed"])

    started = time.monotonic()
    try:
        return _run(go)
    except BaseException as error:  # noqa: BLE001
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        timed_out = any(isinstance(e, TimeoutError) for e in _leaves(error)) or \
            time.monotonic() - started >= config.timeout_seconds
        what = f"timed out after {config.timeout_seconds:g} s" if timed_out else _safe(error)
        logger.warning("MCP server %s: call of %s failed (%s)", config.name, remote_name[:100], what)
        return CallReply("UNKNOWN" if state["sent"] else "UNAVAILABLE", error=what,
                         list_changed=state["list_changed"])
