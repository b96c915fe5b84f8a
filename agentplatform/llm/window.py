"""One model call of the agent loop, fitted to the model's context window.

When the provider answers `context_length_exceeded`, the request is trimmed and sent once more:

1. the conversation memory (earlier runs' messages, after the system prompt) loses its oldest
   turns first (a turn starts at a user message) until the request is at most half its size, or
   the memory is empty;
2. every tool result, in the memory and in this run, is summarised to its code
   (`{"success", "code", "message": "result trimmed ..."}`): the call ids stay answered, so the
   history remains valid.

The run's own messages (this user message, this turn's assistant messages) are never dropped. If
the trimmed request is still too long, `ModelContextTooLong` is raised with a message saying so.
Nothing is stored: the trimming applies to the retried request only.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from agentplatform.llm import client as llm
from agentplatform.llm.errors import ModelContextTooLong
from agentplatform.llm.types import ModelTurn

logger = logging.getLogger(__name__)

TRIMMED = "result trimmed to fit the model's context window; only its code is kept"


def _size(messages: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)


def summarise_tool_result(message: dict[str, Any]) -> dict[str, Any]:
    """A tool message whose content is cut down to its ToolResult code (and success flag)."""
    try:
        result = json.loads(message.get("content") or "")
    except (TypeError, ValueError):
        result = None
    if isinstance(result, dict):
        summary = {"success": bool(result.get("success")), "code": str(result.get("code") or "")[:64]}
    else:
        summary = {"success": False, "code": ""}
    return {**message, "content": json.dumps({**summary, "message": TRIMMED}, separators=(",", ":"))}


def _turns(memory: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    turns: list[list[dict[str, Any]]] = []
    for message in memory:
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def trim(system: list[dict[str, Any]], memory: list[dict[str, Any]],
         messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request messages after trimming (see module doc): system messages, the memory without
    its oldest turns, this run's messages, with every tool result summarised to its code."""
    target = _size([*system, *memory, *messages]) // 2
    turns = _turns(memory)
    summarise = [[summarise_tool_result(m) if m.get("role") == "tool" else m for m in turn] for turn in turns]
    current = [summarise_tool_result(m) if m.get("role") == "tool" else m for m in messages]
    while summarise and _size([*system, *(m for t in summarise for m in t), *current]) > target:
        summarise.pop(0)  # the oldest turn first
    kept = [m for turn in summarise for m in turn]
    logger.info("context window exceeded: memory trimmed from %d to %d messages", len(memory), len(kept))
    return [*system, *kept, *current]


def complete_in_window(*, system: list[dict[str, Any]], memory: list[dict[str, Any]],
                       messages: list[dict[str, Any]], tools: list[dict], on_text: Callable[[str], None] | None
                       ) -> ModelTurn:
    """`llm.complete` of system + memory + messages; on ModelContextTooLong, once more with the
    trimmed request (module doc). Each attempt has its own LLM_DEADLINE_SECONDS.

    Raises what `llm.complete` raises; ModelContextTooLong when the trimmed request is too long too.
    """
    try:
        return llm.complete(messages=[*system, *memory, *messages], tools=tools, on_text=on_text)
    except ModelContextTooLong as error:
        first = error
    try:
        return llm.complete(messages=trim(system, memory, messages), tools=tools, on_text=on_text)
    except ModelContextTooLong as error:
        raise ModelContextTooLong(
            f"{error.message}; the request was already retried once with the memory trimmed (oldest turns "
            f"dropped, tool results cut to their codes): start a new conversation, lower AGENT_MEMORY_WINDOW "
            f"or use a model with a larger context window", provider_status=error.provider_status) from first
