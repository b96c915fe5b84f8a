"""Support of the third-party client tests: the OpenAI Agents SDK's `MCPServerStreamableHttp` (a
client nobody here wrote) driven from synchronous test code, the REST calls people make to decide
(the requester's token and confirm, the approvers' approve), and API keys issued as in set-up.

The Agents SDK is async and its session lives in one event loop: `AgentsClient` runs that loop in a
thread of its own and keeps one connected session for all the calls of a test (as an agent does),
so a retry travels on the same session, and the test thread stays free for the ORM.
"""
from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import Future
from typing import Any

import httpx

CLIENT_TIMEOUT_SECONDS = 30


def issue_key(user, *, name: str) -> str:
    """A fresh API key of `user` (set-up: the operator's path, audited), shown once: the raw key."""
    from agentplatform.tenancy.credentials import api_token_issue

    return api_token_issue(user=user, name=name)


class AgentsClient:
    """The Agents SDK's MCP client connected to `url` with `Authorization: Bearer <key>`.

    Methods block until the SDK answers (at most CLIENT_TIMEOUT_SECONDS); `close()` ends the
    session. `call(name, arguments)` returns the SDK's CallToolResult (mcp types)."""

    def __init__(self, url: str, key: str, *, name: str = "agents-sdk-under-test") -> None:
        from agents.mcp import MCPServerStreamableHttp

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"agents-sdk-{name}", daemon=True)
        self._thread.start()
        self.server = MCPServerStreamableHttp(
            name=name,
            params={"url": url, "headers": {"Authorization": f"Bearer {key}"}, "timeout": CLIENT_TIMEOUT_SECONDS},
            cache_tools_list=False, use_structured_content=True, client_session_timeout_seconds=CLIENT_TIMEOUT_SECONDS)
        self._run(self.server.connect())

    def _run(self, coro) -> Any:
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=CLIENT_TIMEOUT_SECONDS * 2)

    def tools(self) -> list[Any]:
        """The listed tools (the SDK's mcp Tool objects)."""
        return self._run(self.server.list_tools())

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """One tools/call through the SDK's server object (no model in between)."""
        return self._run(self.server.call_tool(name, arguments))

    def close(self) -> None:
        try:
            self._run(self.server.cleanup())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def __enter__(self) -> AgentsClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def structured(result: Any) -> dict[str, Any]:
    """The result's structuredContent (falling back to the JSON of its first text content)."""
    data = getattr(result, "structured_content", None)
    if data is None:
        data = getattr(result, "structuredContent", None)
    if data is not None:
        return data
    return json.loads(result.content[0].text)


def is_error(result: Any) -> bool:
    """True for a tool error result (isError)."""
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


def is_pending(result: Any) -> bool:
    """True for the platform's pending answer: not an error, structuredContent status "pending"."""
    return not is_error(result) and structured(result).get("status") == "pending"


class Rest:
    """The platform's REST API at `base_url` with `Authorization: Token <key>` (how a program or a
    person's script decides)."""

    def __init__(self, base_url: str, key: str) -> None:
        self.client = httpx.Client(base_url=base_url, headers={"Authorization": f"Token {key}"}, timeout=30)

    def post(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """POST `body` as JSON to `path` (e.g. "/api/v1/approvals/<id>/reject/")."""
        return self.client.post(path, json=body or {})

    def confirm_own(self, request_id: str) -> httpx.Response:
        """The requester confirms their own request: a fresh token, then confirm with it."""
        issued = self.post(f"/api/v1/confirmations/{request_id}/token/")
        assert issued.status_code == 200, issued.text
        return self.post("/api/v1/confirmations/confirm/", {"token": issued.json()["token"]})

    def approve(self, request_id: str, comment: str = "checked") -> httpx.Response:
        """Approve `request_id` as this key's user (200, or the API's error body)."""
        return self.post(f"/api/v1/approvals/{request_id}/approve/", {"comment": comment})

    def close(self) -> None:
        self.client.close()
