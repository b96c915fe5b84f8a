"""Refusing a whole model turn that must not execute: cut short, with unparseable arguments, or
with more tool calls than one turn may make. Nothing in such a turn executes (a turn runs only
once it is complete), and every call id is told why. Runs inside the caller's step."""
from __future__ import annotations

from typing import Any

from django.conf import settings

from agentplatform.llm.types import ModelTurn
from agentplatform.runtime.step import Step
from core.text import loads_json, says_nothing
from audit import events as audit
from tools.context import ToolContext
from tools.manager import ToolCallingManager
from tools.results import ToolResult


def _unparseable(arguments: Any) -> bool:
    if says_nothing(arguments):
        return False  # the empty object (core.text.says_nothing): the pipeline judges it
    try:
        return not isinstance(loads_json(arguments), dict)
    except (TypeError, ValueError):
        return True


def turn_refuse(step: Step, ctx: ToolContext, turn: ModelTurn, manager: ToolCallingManager) -> bool:
    """Refuse `turn` when it was cut short (finish_reason length/content_filter), carries a call
    with unparseable arguments, or makes more than AGENT_MAX_TOOL_CALLS_PER_TURN calls: each call
    id gets a tool message (TURN_INCOMPLETE or TOO_MANY_TOOL_CALLS, retryable) and an audit row.
    Written with `step`. Returns True when refused, False when the turn may run."""
    limit = settings.AGENT_MAX_TOOL_CALLS_PER_TURN
    too_many = turn.complete and len(turn.tool_calls) > limit
    bad = {c.id for c in turn.tool_calls if _unparseable(c.arguments)} if turn.complete and not too_many else set()
    if turn.complete and not bad and not too_many:
        return False
    code = "TURN_INCOMPLETE"
    if too_many:
        code = "TOO_MANY_TOOL_CALLS"
        why = f"your reply made {len(turn.tool_calls)} tool calls, more than the {limit} one turn may make"
    elif bad:
        # The broken calls go through the pipeline, which rejects them at step 2 (and audits them).
        for message in manager.execute_tool_calls(ctx, turn.assistant_message(), on_event=step.emit,
                                                  only=bad).tool_messages:
            step.append(message)
        why = "another call in the same turn had unparseable arguments"
    else:
        why = f"your reply was cut off (finish_reason={turn.finish_reason})"
    again = f"make at most {limit} calls" if too_many else "send complete tool calls again"
    result = ToolResult.failure(code, f"{why}; no tool was executed; {again}", retryable=True, terminal=False)
    for call in turn.tool_calls:
        if call.id in bad:
            continue
        audit.tool_call_invalid(tenant_id=ctx.tenant_id, actor_id=ctx.user_id, tool_name=call.name[:100],
                     status=result.code, request_id=ctx.request_id, conversation_id=ctx.conversation_id,
                     run_id=ctx.run_id, tool_call_id=call.id, message=result.message)
        step.append({"role": "tool", "tool_call_id": call.id, "content": result.to_json()})
    return True
