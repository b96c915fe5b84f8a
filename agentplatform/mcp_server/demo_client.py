"""The demo's MCP client: the official `mcp` SDK's `ClientSession` over streamable HTTP, driven from
synchronous code (the demo command) through an event loop in a thread of its own, so one session
stays open for all the calls of the step, as an agent keeps it.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
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
        """True when the call waits for a decision (nothing ran yet)."""
        return not self.error and self.data.get("status") == "pending"


class Session:
    """An initialized MCP session to `url` with `Authorization: Bearer <key>`. Use as a context
    manager. Raises what the SDK raises when the server cannot be reached (the demo then fails).

    The SDK's transport and session are anyio task groups, which must be entered and left by one
    task: one task in the client's thread opens them, serves the calls sent to it, and closes them."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self._key = url, key
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="demo-mcp-client", daemon=True)
        self._inbox: asyncio.Queue | None = None
        self._done: Future | None = None

    async def _serve(self, opened: Future) -> None:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp_types import Implementation

        self._inbox = asyncio.Queue()
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {self._key}"},
                                          timeout=TIMEOUT_SECONDS) as http:
                async with streamable_http_client(self.url, http_client=http) as (read, write):
                    info = Implementation(name="agentplatform-demo", version="1.0")
                    async with ClientSession(read, write, client_info=info) as session:
                        await session.initialize()
                        opened.set_result(None)
                        while (work := await self._inbox.get()) is not None:
                            action, answer = work
                            try:
                                answer.set_result(await action(session))
                            except Exception as error:  # handed to the caller's thread
                                answer.set_exception(error)
        except Exception as error:
            if not opened.done():
                opened.set_exception(error)
                return
            raise

    def _ask(self, action: Callable[[Any], Awaitable[Any]]) -> Any:
        answer: Future = Future()
        self._loop.call_soon_threadsafe(self._inbox.put_nowait, (action, answer))
        return answer.result(timeout=TIMEOUT_SECONDS)

    def __enter__(self) -> Session:
        self._thread.start()
        opened: Future = Future()
        self._done = asyncio.run_coroutine_threadsafe(self._serve(opened), self._loop)
        try:
            opened.result(timeout=TIMEOUT_SECONDS)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._inbox is not None and self._done is not None and not self._done.done():
                self._loop.call_soon_threadsafe(self._inbox.put_nowait, None)
                self._done.result(timeout=TIMEOUT_SECONDS)
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def list_tool_names(self) -> list[str]:
        """The names `tools/list` answers."""
        async def names(session) -> list[str]:
            return [tool.name for tool in (await session.list_tools()).tools]

        return self._ask(names)

    def call(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """One `tools/call`."""
        result = self._ask(lambda session: session.call_tool(name, arguments))
        data = result.structured_content
        if data is None:
            text = next((c.text for c in result.content if getattr(c, "type", "") == "text"), "{}")
            try:
                data = json.loads(text)
            except ValueError:
                data = {"text": text}
        return CallResult(data=data if isinstance(data, dict) else {"value": data}, error=bool(result.is_error))
