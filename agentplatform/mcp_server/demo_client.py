"""The demo's MCP client: the official `mcp` SDK's `ClientSession` over streamable HTTP, driven from
synchronous code (the demo command) through an event loop in a thread of its own, so one session
stays open for all the calls of the step, as an agent keeps it.
"""
from __future__ import annotations

import asyncio
import json
import threading
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class CallResult:
    """A tools/call answer as the demo reads it. data: structuredContent (or the JSON of the text);
    error: isError; pending: a non-error result whose data says status "pending"."""

    data: dict[str, Any]
    error: bool

    @property
    def pending(self) -> bool:
        return not self.error and self.data.get("status") == "pending"


class Session:
    """An initialized MCP session to `url` with `Authorization: Bearer <key>`. Use as a context
    manager. Raises what the SDK raises when the server cannot be reached (the demo then fails)."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self._key = url, key
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="demo-mcp-client", daemon=True)
        self._stack: AsyncExitStack | None = None
        self._session: Any = None

    def _run(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=TIMEOUT_SECONDS)

    async def _open(self) -> None:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp_types import Implementation

        self._stack = AsyncExitStack()
        http = await self._stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {self._key}"}, timeout=TIMEOUT_SECONDS))
        read, write = await self._stack.enter_async_context(streamable_http_client(self.url, http_client=http))
        self._session = await self._stack.enter_async_context(
            ClientSession(read, write, client_info=Implementation(name="agentplatform-demo", version="1.0")))
        await self._session.initialize()

    def __enter__(self) -> Session:
        self._thread.start()
        self._run(self._open())
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._stack is not None:
                self._run(self._stack.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def list_tool_names(self) -> list[str]:
        """The names `tools/list` answers (every page)."""
        async def names() -> list[str]:
            result = await self._session.list_tools()
            return [tool.name for tool in result.tools]

        return self._run(names())

    def call(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """One `tools/call`."""
        result = self._run(self._session.call_tool(name, arguments))
        data = result.structured_content
        if data is None:
            text = next((c.text for c in result.content if getattr(c, "type", "") == "text"), "{}")
            try:
                data = json.loads(text)
            except ValueError:
                data = {"text": text}
        return CallResult(data=data if isinstance(data, dict) else {"value": data}, error=bool(result.is_error))
