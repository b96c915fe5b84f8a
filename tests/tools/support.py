"""Helpers of the governed tool call tests, shared by tests/tools, tests/approvals,
tests/audit and the runtime tests: a scripted model at the HTTP edge, throwaway tools, and
builders for assistant messages and tool contexts.

Fixtures here are imported by the conftests of those folders (and by runtime test modules, which
have no conftest of their own): `model`, `install_tool`. `race` lines real threads up on a barrier
for the PostgreSQL concurrency tests.
"""
from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from guardian.shortcuts import assign_perm

from tests.llm.fake_openai_server import (
    FakeOpenAIServer,
    chunk,
    completion,
    function_call,
    json_response,
    sse_response,
    tool_delta,
)
from tools.context import ToolContext
from tools.models import Tool
from tools.registry import ToolSpec, registry
from tools.services import tenant_tool_set_enabled, tools_sync_registry

ORDER = "A202607290001"  # acme, PAID
SHIPPED_ORDER = "A202607290002"  # acme, SHIPPED
REFUND_ORDER = "A202607290003"  # acme, PAID
GLOBEX_ORDER = "A202607300001"  # globex, PAID
CANCEL_ARGS = {"order_id": ORDER, "reason": "customer changed their mind"}

Call = tuple[str, str, Any]  # (tool_call_id, tool name, arguments: raw str, or anything JSON-encoded)


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def assistant(*calls: Call, content: str | None = None) -> dict[str, Any]:
    """An OpenAI assistant message proposing `calls` (arguments kept raw when given as a string)."""
    return {"role": "assistant", "content": content,
            "tool_calls": [function_call(call_id, name, _arguments(args)) for call_id, name, args in calls]}


def tool_context(user, conversation_id: uuid.UUID, *, confirmations: dict[str, Any] | None = None,
                 run_id: uuid.UUID | None = None) -> ToolContext:
    """A server-side ToolContext for `user` (as build_tool_context makes one for a run)."""
    return ToolContext(tenant=user.tenant, user=user, conversation_id=conversation_id, run_id=run_id,
                       request_id="test-request", confirmations=dict(confirmations or {}))


class ScriptedModel:
    """The model endpoint faked at the HTTP edge: the real SDK client talks to a FakeOpenAIServer.

    `calls(...)` / `says(...)` enqueue one assistant turn each; `requests` are what the platform
    sent; `tool_answers(i)` decodes the tool messages of request i by tool_call_id. With
    `streaming=True` turns are sent as SSE chunks (arguments split in two fragments).
    """

    def __init__(self, server: FakeOpenAIServer, settings) -> None:
        self.server = server
        self._settings = settings

    @property
    def streaming(self) -> bool:
        return bool(self._settings.LLM_STREAM)

    @streaming.setter
    def streaming(self, value: bool) -> None:
        self._settings.LLM_STREAM = value

    def calls(self, *calls: Call, content: str | None = None) -> None:
        if not self.streaming:
            self.server.enqueue(json_response(completion(
                content=content, finish_reason="tool_calls",
                tool_calls=[function_call(i, name, _arguments(args)) for i, name, args in calls])))
            return
        chunks: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": content})]
        for index, (call_id, name, args) in enumerate(calls):
            text = _arguments(args)
            half = len(text) // 2
            chunks.append(chunk(tool_delta(index, id=call_id, name=name, arguments=text[:half])))
            chunks.append(chunk(tool_delta(index, arguments=text[half:])))
        chunks.append(chunk({}, "tool_calls"))
        self.server.enqueue(sse_response(chunks))

    def says(self, text: str) -> None:
        if not self.streaming:
            self.server.enqueue(json_response(completion(content=text)))
            return
        self.server.enqueue(sse_response([chunk({"role": "assistant", "content": text}), chunk({}, "stop")]))

    @property
    def requests(self) -> list:
        return self.server.requests

    def messages(self, index: int) -> list[dict[str, Any]]:
        return self.server.requests[index].body["messages"]

    def tool_answers(self, index: int) -> dict[str, dict[str, Any]]:
        """tool_call_id -> decoded ToolResult of every tool message in request `index`."""
        return {m["tool_call_id"]: json.loads(m["content"]) for m in self.messages(index) if m["role"] == "tool"}


@pytest.fixture
def model(scripted_model: FakeOpenAIServer, settings) -> ScriptedModel:
    """The conftest's `scripted_model` server (the platform's real client points at it, not
    streaming) behind the ScriptedModel helpers."""
    settings.LLM_MODEL = "gpt-4o-mini"
    return ScriptedModel(scripted_model, settings)


@pytest.fixture
def install_tool(people) -> Iterator[Callable[..., Tool]]:
    """Register a throwaway tool for the test: `install(spec, users=[...])` registers it in code,
    mirrors it, enables it for the users' tenants and grants them `use_tool`. Unregistered after."""
    installed: list[str] = []

    def install(spec: ToolSpec, *, users=()) -> Tool:
        registry.register(spec)
        installed.append(spec.name)
        tools_sync_registry()
        row = Tool.objects.get(name=spec.name)
        for tenant_id in {user.tenant_id for user in users}:
            tenant_tool_set_enabled(tenant_id=tenant_id, tool_name=spec.name, enabled=True)
        for user in users:
            assign_perm("tools.use_tool", user, row)
        return row

    yield install
    for name in installed:
        registry.unregister(name)


def audit_rows(**filters):
    """The tool-call audit events matching `filters`, oldest first (a tiny selector for assertions).
    Control-plane rows (the demo data's, `install_tool`'s) are left out unless asked for by decision."""
    from audit.models import AuditEvent

    rows = AuditEvent.objects.filter(**filters)
    if "decision" not in filters:
        rows = rows.exclude(decision=AuditEvent.Decision.CONTROL_CHANGE)
    return list(rows.order_by("occurred_at", "id"))


def race(n: int, prepare: Callable[[int], Any], act: Callable[[Any], Any]) -> list[Any]:
    """Run `act(prepare(i))` in n real threads lined up on a barrier; return each result or the
    exception it raised, in thread order. Every thread closes its own database connection."""
    barrier = threading.Barrier(n, timeout=60)

    def worker(index: int) -> Any:
        try:
            state = prepare(index)
            barrier.wait()
            return act(state)
        except BaseException as error:  # noqa: BLE001 - reported to the test, which asserts on it
            barrier.abort()
            return error
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(worker, range(n)))


@contextlib.contextmanager
def resume_not_enqueued() -> Iterator[None]:
    """Decide without the runtime enqueueing the resume, so the test resumes (or claims) the run itself."""
    from agentplatform.runtime.receivers import enqueue_resume_on_commit
    from approvals.signals import confirmation_settled

    uid = "runtime.resume_on_settle"
    confirmation_settled.disconnect(dispatch_uid=uid)
    try:
        yield
    finally:
        confirmation_settled.connect(enqueue_resume_on_commit, dispatch_uid=uid)
