"""ToolCallingManager: resolve the tool definitions offered to a context, and run every call of an
assistant message as a governed call (tools.governed_call), answering `tool_search` itself."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model

from core import correlation
from tools import search, tracing
from tools.call_audit import CallAudit
from tools.calls import CallOutcome, ToolCall, ToolExecutionResult, parse_tool_calls
from tools.context import ToolContext
from tools.governed_call import GovernedCall
from tools.models import Tool
from tools.registry import ToolSpec
from tools.results import ToolResult
from tools.selectors import offered_tools

EventSink = Callable[[str, dict[str, Any]], None]


def _searching(offered: dict[str, Any]) -> bool:
    """True when more tools are offered than TOOL_SEARCH_THRESHOLD: the model gets tool_search."""
    return len(offered) > settings.TOOL_SEARCH_THRESHOLD


_DEFINITIONS: dict[tuple[str, str, type], str] = {}


def _definition(spec: ToolSpec) -> dict[str, Any]:
    """`spec.definition()`, built once per (name, description, parameter model): pydantic rebuilds the
    JSON Schema on every call (about 1 ms per tool, measured by bench/confirm_latency.py) although
    it only changes with the code. Returns a fresh copy each time, so callers may modify it."""
    key = (spec.name, spec.description, spec.parameters)
    text = _DEFINITIONS.get(key)
    if text is None:
        text = _DEFINITIONS[key] = json.dumps(spec.definition())
    return json.loads(text)


class ToolCallingManager:
    """Resolves tool definitions and executes tool calls through the governed pipeline."""

    def offered(self, ctx: ToolContext) -> dict[str, tuple[ToolSpec, Tool]]:
        """name -> (spec, row) of the tools offered to the context's user.

        The set resolved for this run (`resolve`) when the context carries one; queried afresh when
        it does not, and always when a confirmation is consumed: permissions, tenant policy and risk
        are re-checked at consume time, not only when the call was requested.
        """
        if ctx.offered_tools is not None and not ctx.consumes:
            return ctx.offered_tools
        if ctx.user.tenant_id != ctx.tenant_id:
            return {}  # moved to another tenant since the run began: nothing runs in the old one
        offered = offered_tools(user=ctx.user)
        if ctx.offered:
            offered = {name: pair for name, pair in offered.items() if name in ctx.offered}
        return offered

    def resolve(self, ctx: ToolContext, *, refresh: bool = False) -> tuple[list[dict[str, Any]], ToolContext]:
        """Resolve the tools offered to this context's user now (enabled, allowed for the tenant,
        `use_tool` and the tool's permission held). Returns (OpenAI tool schemas, the context bound
        to that set, for the calls of this run). Tools not offered are not sent to the model at all.

        A context that already carries a resolved set with no confirmation left to consume (a
        resumed run, whose consume re-queried the set a moment ago) keeps that set, unless `refresh`
        (the loop refreshes before every later model call of a run)."""
        if refresh:
            # Django caches permissions and is_active on the user object for its lifetime: read the
            # user again, so a permission revoked or an account deactivated meanwhile is in force.
            ctx = replace(ctx, user=get_user_model().objects.select_related("tenant").get(pk=ctx.user.pk))
        if ctx.offered_tools is not None and not ctx.consumes and not refresh:
            offered = ctx.offered_tools
        elif ctx.user.tenant_id != ctx.tenant_id:
            offered = {}
        else:
            offered = offered_tools(user=ctx.user)
        bound = replace(ctx, offered=frozenset(offered), offered_tools=offered)
        if _searching(offered):
            # Too many to send: `tool_search` and what this run found with it.
            found = [_definition(offered[name][0]) for name in sorted(ctx.discovered) if name in offered]
            return [search.definition(), *found], bound
        return [_definition(spec) for spec, _ in offered.values()], bound

    def resolve_definitions(self, ctx: ToolContext) -> list[dict[str, Any]]:
        """Return the OpenAI tool schemas offered to this context's user. See `resolve`."""
        return self.resolve(ctx)[0]

    def execute_tool_calls(
        self, ctx: ToolContext, assistant_message: dict[str, Any], *, on_event: EventSink | None = None,
        only: set[str] | None = None,
    ) -> ToolExecutionResult:
        """Run each call of an assistant message as a governed call (tools.governed_call).

        ctx: server-built context (its `confirmations` map call ids to requests to consume on
        resume). only: restrict to these call ids (resume). on_event(type, payload): progress
        sink for TOOL_CALL_STARTED / CONFIRMATION_REQUIRED / TOOL_EXECUTION_COMPLETED.
        Returns the outcomes (every call id answered once, or pending). Raises ToolPermissionDenied
        and the system errors tools.execution.propagates names, after auditing them.
        """
        emit = on_event or (lambda kind, payload: None)
        offered = self.offered(ctx)
        outcomes = []
        turn: dict[tuple[str, str], CallOutcome] = {}
        for call in parse_tool_calls(assistant_message):
            if only is not None and call.id not in only:
                continue
            emit("TOOL_CALL_STARTED", {"tool_call_id": call.id, "tool": call.name})
            if call.name == search.NAME and _searching(offered):
                outcome = self._search(ctx, call, offered)
            else:
                outcome = self.execute_call(ctx, call, offered, turn=turn)
            if outcome.pending is not None:
                emit("CONFIRMATION_REQUIRED", outcome.pending.public())
            else:
                emit("TOOL_EXECUTION_COMPLETED", {"tool_call_id": call.id, "tool": call.name,
                                                  "success": outcome.result.success, "code": outcome.result.code})
            outcomes.append(outcome)
        return ToolExecutionResult(outcomes, offered=offered)

    def _search(self, ctx: ToolContext, call: ToolCall, offered: dict[str, tuple[ToolSpec, Tool]]) -> CallOutcome:
        """Answer a `tool_search` call from the index of the tools offered to this user in this
        tenant: the best matches' definitions, which the model may call from now on (each call
        still passes the whole pipeline). Audited like any call (the query masked)."""
        audit = CallAudit(ctx, call, time.perf_counter())
        audit.owner, audit.version = settings.TOOLS_DEFAULT_OWNER, settings.TOOLS_DEFAULT_VERSION
        query = search.parse_query(call.arguments)
        if query is None:
            return CallOutcome(call, audit.invalid('arguments must be {"query": "<what you want to do>"}'))
        audit.arguments({"query": query})
        definitions = {name: _definition(spec) for name, (spec, _) in offered.items()}
        index = search.index_for(tenant_id=ctx.tenant_id, offered=offered, definitions=definitions)
        found = [d["function"] for d in index.search(query, limit=settings.TOOL_SEARCH_RESULTS)]
        ctx.discovered.update(f["name"] for f in found)
        message = f"{len(found)} tools found; call them by name" if found else "no tool matches; rephrase the query"
        return CallOutcome(call, audit.stop("EXECUTED", ToolResult.ok({"tools": found}, message)))

    def execute_call(self, ctx: ToolContext, call: ToolCall, offered: dict[str, tuple[ToolSpec, Tool]], *,
                     turn: dict[tuple[str, str], CallOutcome] | None = None) -> CallOutcome:
        """Run one call as a governed call (tools.governed_call.GovernedCall), with the tool's name
        and the call id bound for log lines. See `execute_tool_calls` for the errors raised.

        turn: the gated calls of this model turn so far by (tool, arguments hash): an identical
        gated call shares the first one's confirmation request and outcome. A call that consumes a
        confirmation (`ctx.confirmations`) is judged again against what is in force now: a tool no
        longer offered, a permission lost or a DENY policy refuse the request (REFUSED) and answer
        the model with TOOL_DISABLED / PERMISSION_DENIED / POLICY_DENIED instead of raising.
        """
        bound = correlation.bind(tool=call.name[:100], tool_call_id=call.id)
        try:
            with tracing.execute_tool(ctx, call) as span:  # docs/observability.md; None when off
                outcome = self._execute_call(ctx, call, offered, turn=turn)
                tracing.call_answered(span, outcome)
                return outcome
        finally:
            correlation.reset(bound)

    def _execute_call(self, ctx: ToolContext, call: ToolCall, offered: dict[str, tuple[ToolSpec, Tool]], *,
                      turn: dict[tuple[str, str], CallOutcome] | None) -> CallOutcome:
        return GovernedCall(ctx, call, offered, turn=turn).run()
