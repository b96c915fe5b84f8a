"""The `execute_tool {tool}` span of one governed call (OpenTelemetry GenAI semantic conventions,
docs/observability.md), at no cost when tracing is off (core.tracing).

`ToolCallingManager.execute_call` opens it; the pipeline adds what it learns while the call is
judged (`call_judged`: risk, policy) and each audit row it writes (`call_decided`: the decision,
the outcome code). Attributes never hold the arguments or the result, unless the masked-content
opt-in adds their masked form (the audit row's masked arguments, the converted result's data).
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from core import tracing
from tools.calls import CallOutcome, ToolCall
from tools.context import ToolContext
from tools.results import ToolResult

# The execute_tool span of the call running in this context (None: none, or tracing is off).
_CURRENT: ContextVar[Any] = ContextVar("execute_tool_span", default=None)


def channel_name(ctx: ToolContext) -> str:
    """How the call arrived: "mcp" (or another channel's name) when the context says so, else "chat"."""
    return str((ctx.channel or {}).get("name") or "chat")


class _ToolSpan:
    """Context manager: the execute_tool span, current (and known to the hooks) while it is open."""

    def __init__(self, ctx: ToolContext, call: ToolCall) -> None:
        self.ctx, self.call, self.token, self.opened = ctx, call, None, None

    def __enter__(self) -> Any:
        ctx, call = self.ctx, self.call
        name = call.name[:100] or "-"
        self.opened = tracing.span(f"execute_tool {name}", {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call.id[:128],
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": str(ctx.conversation_id),
            "agentplatform.channel": channel_name(ctx),
            "agentplatform.run.id": str(ctx.run_id) if ctx.run_id else None,
            "agentplatform.tenant.id": ctx.tenant_id,
            "agentplatform.consumes_confirmation": call.id in ctx.confirmations,
        })
        current = self.opened.__enter__()
        self.token = _CURRENT.set(current)
        return current

    def __exit__(self, *exc: Any) -> Any:
        _CURRENT.reset(self.token)
        return self.opened.__exit__(*exc)


def execute_tool(ctx: ToolContext, call: ToolCall):
    """The context manager of one governed call's span; yields the span (None when off)."""
    if not tracing.on():
        return tracing.OFF
    return _ToolSpan(ctx, call)


def call_judged(policy: Any) -> None:
    """The policy in force for the running call (tools.policy.EffectivePolicy): risk, policy, quorum."""
    current = _CURRENT.get()
    if current is None:
        return
    tracing.set_attributes(current, {"agentplatform.risk": policy.risk, "agentplatform.policy": policy.policy,
                                     "agentplatform.quorum": policy.quorum})


def call_decided(decision: str, result: ToolResult, masked_arguments: Any = None) -> None:
    """An audit row of the running call was written with `decision` and `result` (the last one wins;
    each is also an event of the span)."""
    current = _CURRENT.get()
    if current is None or not current.is_recording():
        return
    attributes = {"agentplatform.decision": decision, "agentplatform.outcome.code": result.code,
                  "agentplatform.outcome.success": result.success,
                  "agentplatform.idempotent_hit": decision == "IDEMPOTENT_HIT"}
    current.add_event("agentplatform.audit", {"agentplatform.decision": decision,
                                              "agentplatform.outcome.code": result.code})
    if tracing.capture_content():
        if masked_arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = tracing.content(masked_arguments)
        if decision in ("EXECUTED", "IDEMPOTENT_HIT") and result.data is not None:
            attributes["gen_ai.tool.call.result"] = tracing.content(result.data)  # converted: masked
    tracing.set_attributes(current, attributes)


def call_answered(current: Any, outcome: CallOutcome) -> None:
    """The call's outcome: the code the model is answered with, and the request it waits on."""
    if current is None:
        return
    pending = outcome.pending
    tracing.set_attributes(current, {
        "agentplatform.outcome.code": outcome.result.code,
        "agentplatform.outcome.success": outcome.result.success,
        "agentplatform.pending": pending is not None,
        "agentplatform.approval.request.id": str(pending.confirmation_id) if pending is not None else None,
    })
