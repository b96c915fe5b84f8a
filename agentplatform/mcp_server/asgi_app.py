"""The ASGI application serving /mcp and /mcp/ (mounted in agentplatform.asgi in front of Django).

For every HTTP request, before any MCP message is read: the bearer API key is resolved
(agentplatform.mcp_server.auth; 401 `{"code", "detail"}` with `WWW-Authenticate: Bearer`), a body
over MCP_MAX_BODY_BYTES is refused (413 PAYLOAD_TOO_LARGE, also when Content-Length understates it
or the body is chunked) and malformed JSON (nested too deep included) answers JSON-RPC -32700
(`data.code` PARSE_ERROR). Then the SDK's StreamableHTTPSessionManager serves the request (stateful
sessions bound to the key that opened them, SSE or JSON responses, Host/Origin checked against
ALLOWED_HOSTS). The manager and the session watchers run in one background task started on the
first request or by the ASGI lifespan.
"""
from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from agentplatform.mcp_server import sessions
from agentplatform.ops import tracing
from agentplatform.mcp_server.auth import AuthFailure, authenticate
from agentplatform.mcp_server.http_errors import with_codes
from agentplatform.mcp_server.replies import PRINCIPAL_KEY, REQUEST_ID_KEY
from agentplatform.mcp_server.server import build_server

PATHS = frozenset({"/mcp", "/mcp/"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def transport_security() -> TransportSecuritySettings:
    """DNS-rebinding protection as the SDK defines it, from Django's ALLOWED_HOSTS: each host with
    any port, and Origins on those hosts (http and https) plus PLATFORM_BASE_URL's. Off when
    ALLOWED_HOSTS has "*". A leading-dot subdomain pattern is taken as its bare domain only."""
    hosts = [host.lstrip(".") for host in settings.ALLOWED_HOSTS if host]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    base = urlsplit(settings.PLATFORM_BASE_URL)
    origins = [f"{base.scheme}://{base.netloc}"]
    for host in hosts:
        origins += [f"{scheme}://{host}{port}" for scheme in ("http", "https") for port in ("", ":*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[h for host in hosts for h in (host, f"{host}:*")],
                                     allowed_origins=origins)


async def _json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


class BodyTooLarge(Exception):
    """The request body is over MCP_MAX_BODY_BYTES."""


async def read_body(scope: dict[str, Any], receive: Any, limit: int) -> bytes:
    """The whole request body, refusing (BodyTooLarge) as soon as Content-Length or the bytes
    received pass `limit`: a lying Content-Length or a chunked body never makes us buffer more."""
    declared = dict(scope["headers"]).get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _valid_id(message: dict[str, Any]) -> bool:
    """Whether a JSON-RPC message's `id`, when it has one, is a string, an integer or null (JSON-RPC
    2.0 section 4: a String, Number or Null; MCP: a string or an integer, so no fraction, no object,
    array or boolean; a null id is left to the SDK)."""
    if "id" not in message:
        return True
    value = message["id"]
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _replay(body: bytes, receive: Any) -> Any:
    """A `receive` that hands the already read body once, then the client's later messages
    (disconnect) as they come."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class McpApp:
    """The /mcp endpoint. One per process; `startup()`/`shutdown()` run the session manager."""

    def __init__(self) -> None:
        self.manager: StreamableHTTPSessionManager | None = None
        # Serves a follow-up of a session this process does not hold (opened on another worker, or
        # ended here): each request on its own, as for a client without elicitation or a stream.
        self.stateless: StreamableHTTPSessionManager | None = None
        self._task: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None

    async def _run(self, manager: StreamableHTTPSessionManager) -> None:
        import anyio

        async with anyio.create_task_group() as task_group, manager.run(), self.stateless.run():
            sessions.runtime.task_group = task_group
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                sessions.runtime.task_group = None
                task_group.cancel_scope.cancel()

    async def startup(self) -> None:
        """Start the session manager's task group once (the first request, or the lifespan)."""
        if self._task is None:
            self._ready, self._stop = asyncio.Event(), asyncio.Event()
            server, security = build_server(), transport_security()
            self.manager = StreamableHTTPSessionManager(
                app=server, json_response=False, security_settings=security,
                max_request_body_size=settings.MCP_MAX_BODY_BYTES,
                session_idle_timeout=settings.MCP_SESSION_IDLE_SECONDS, max_sessions=settings.MCP_MAX_SESSIONS)
            self.stateless = StreamableHTTPSessionManager(
                app=server, json_response=True, stateless=True, security_settings=security,
                max_request_body_size=settings.MCP_MAX_BODY_BYTES)
            self._task = asyncio.get_running_loop().create_task(self._run(self.manager))
        await self._ready.wait()

    async def shutdown(self) -> None:
        """Close every session and stop the manager (the ASGI lifespan's shutdown)."""
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            principal = await authenticate(scope["headers"])
        except AuthFailure as failure:
            await _json(send, 401, {"code": failure.code, "detail": failure.detail},
                        [(b"www-authenticate", b'Bearer realm="mcp"')])
            return
        if scope["method"] == "POST":
            try:
                body = await read_body(scope, receive, settings.MCP_MAX_BODY_BYTES)
            except BodyTooLarge:
                await _json(send, 413, {"code": "PAYLOAD_TOO_LARGE",
                                        "detail": f"the body is over {settings.MCP_MAX_BODY_BYTES} bytes"})
                return
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):  # RecursionError: arrays/objects nested too deep
                await _json(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32700, "message": "Parse error: the body is not JSON", "data": {"code": "PARSE_ERROR"}}})
                return
            if isinstance(message, dict) and not _valid_id(message):
                # The SDK would take such a request for a notification (202, no answer, nothing run):
                # say it is not a request instead.
                await _json(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": "Invalid Request: an id is a string or an integer",
                    "data": {"code": "INVALID_REQUEST"}}})
                return
            receive = _replay(body, receive)
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        key = principal.api_key
        scope = {**scope, PRINCIPAL_KEY: principal,
                 REQUEST_ID_KEY: incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex,
                 # The SDK binds a session to the credential that opened it: the key's public id, never the key.
                 "user": AuthenticatedUser(AccessToken(token="", client_id=f"apikey:{key.public_id}", scopes=[],
                                                       subject=str(principal.user.pk)))}
        await self.startup()
        await self._serve(scope, receive, with_codes(send))

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        session_id = dict(scope["headers"]).get(b"mcp-session-id")
        # The manager keeps its sessions in a private map (mcp 2.3.0 has no public lookup).
        if session_id is None or session_id.decode("latin-1") in getattr(self.manager, "_server_instances", {}):
            await self.manager.handle_request(scope, receive, send)
        elif scope["method"] == "POST":
            await self.stateless.handle_request(scope, receive, send)
        else:
            # No standalone stream and nothing to end for a session held elsewhere (MCP: a server
            # may answer GET and DELETE with 405).
            await _json(send, 405, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "this session is not held by this server process",
                "data": {"code": "METHOD_NOT_ALLOWED"}}})


def router(django_app: Any) -> Any:
    """The process's ASGI application: /mcp and /mcp/ to the MCP server, the lifespan to its
    startup and shutdown, everything else to `django_app`."""
    mcp = McpApp()
    # With tracing on, each MCP request is a server span and its governed calls are children of it.
    served = tracing.wrap_asgi(mcp)

    async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in PATHS:
            await served(scope, receive, send)
        elif scope["type"] == "lifespan":
            await _lifespan(mcp, receive, send)
        else:
            await django_app(scope, receive, send)

    application.mcp = mcp  # type: ignore[attr-defined]
    return application


async def _lifespan(mcp: McpApp, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await mcp.startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await mcp.shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
