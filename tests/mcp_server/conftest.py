"""The MCP server under test: `agentplatform.asgi.application` served by uvicorn in a thread on a
free port (one for the test session, its lifespan starting the MCP session manager), the SDK's own
client (`mcp.client.streamable_http` + `ClientSession`) and raw HTTP against it.

Tests that talk to the live server use committed data (`transactional_db`): the server's worker
threads have their own database connections. On SQLite the test database is one shared-cache memory
database; readers there may read uncommitted rows (as tests/browser does) instead of meeting
"database table is locked".
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from django.db import connections
from django.db.backends.signals import connection_created


def _read_uncommitted(sender=None, connection=None, **kwargs) -> None:
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 1")


class LiveMcp:
    """A running server: `url` of the MCP endpoint, `base` of the whole site."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.url = f"{base}/mcp/"


@pytest.fixture(scope="session")
def _mcp_live_server(django_db_setup, django_db_blocker) -> Iterator[LiveMcp]:
    import uvicorn

    from agentplatform.asgi import application

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="on",
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="mcp-live-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP live server did not start")
        time.sleep(0.05)
    yield LiveMcp(f"http://127.0.0.1:{port}")
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def mcp_live(_mcp_live_server, transactional_db) -> Iterator[LiveMcp]:
    """The live MCP server, on a test database whose rows every thread sees."""
    _read_uncommitted(connection=connections["default"])
    connection_created.connect(_read_uncommitted, dispatch_uid="mcp-read-uncommitted")
    yield _mcp_live_server
    connection_created.disconnect(dispatch_uid="mcp-read-uncommitted")


def issue_key(user, name: str = "mcp test key", *, expires_in_days: int | None = None) -> str:
    """A new API key of `user` (through the platform's service); returns the raw key."""
    from agentplatform.tenancy.credentials import api_key_issue

    _, key = api_key_issue(user=user, name=name, expires_in_days=expires_in_days)
    return key


@asynccontextmanager
async def mcp_session(url: str, key: str, **session_options: Any):
    """An initialized SDK ClientSession on `url` with `Authorization: Bearer <key>`.
    session_options: ClientSession keywords (elicitation_callback, message_handler, ...)."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30))
    async with client, streamable_http_client(url, http_client=client) as (read, write):
        async with ClientSession(read, write, **session_options) as session:
            await session.initialize()
            yield session


def run(coro) -> Any:
    """Run a coroutine to completion from a synchronous test."""
    return asyncio.run(coro)


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw-test", "version": "1"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def raw_post(url: str, body: bytes | dict | None = None, *, key: str | None = None,
             headers: dict[str, str] | None = None, **options: Any) -> httpx.Response:
    """One plain HTTP POST to the MCP endpoint (body: a dict is sent as JSON). key: sent as
    `Authorization: Bearer <key>` unless headers name an Authorization of their own."""
    sent = dict(HEADERS)
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    sent.update(headers or {})
    content = body if isinstance(body, bytes) or body is None else __import__("json").dumps(body).encode()
    return httpx.post(url, content=content, headers=sent, timeout=30, **options)


class RawSession:
    """A hand-made MCP session over plain HTTP (for what the SDK's client does not speak, such as
    task-augmented calls): initialize (2025-11-25), then one JSON-RPC request per POST, the answer
    read from the SSE or JSON response."""

    def __init__(self, url: str, key: str, *, capabilities: dict | None = None) -> None:
        self.url, self.key, self._next = url, key, 1
        opened = raw_post(url, {**INIT, "params": {**INIT["params"], "capabilities": capabilities or {}}}, key=key)
        assert opened.status_code == 200, opened.text
        self.initialize = self._message(opened, 1)["result"]
        self.headers = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        raw_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, key=key, headers=self.headers)

    @staticmethod
    def _message(response: httpx.Response, request_id: int) -> dict:
        import json

        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if message.get("id") == request_id:
                    return message
        raise AssertionError(f"no answer to request {request_id}: {response.status_code} {response.text[:500]}")

    def request(self, method: str, params: dict | None = None) -> dict:
        """The JSON-RPC response (with `result` or `error`) to one request."""
        self._next += 1
        body = {"jsonrpc": "2.0", "id": self._next, "method": method, **({"params": params} if params else {})}
        return self._message(raw_post(self.url, body, key=self.key, headers=self.headers), self._next)
