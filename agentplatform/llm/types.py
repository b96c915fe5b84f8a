"""What one model turn looks like to the agent loop, independent of streaming or not.

Turns are built by `agentplatform.llm.normalize` from whatever the provider sent, so by the time
the loop sees one its call ids are unique, phantom entries are gone, arguments are strings and all
text is storable (see docs/providers.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelToolCall:
    """One complete tool call of a finished turn. `arguments` is the JSON text the model sent (an
    object sent as an object is serialised canonically; text PostgreSQL cannot store is escaped so
    the pipeline refuses it); it may be invalid JSON: the tool pipeline parses and refuses it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelTurn:
    """A finished model turn.

    content: assistant text ("" when none). tool_calls: calls assembled by `index`, normalised.
    finish_reason: "stop" | "tool_calls" | "length" | "content_filter" | ... as the provider sent it.
    reasoning: the provider's reasoning text (DeepSeek `reasoning_content`), "" when none. It is
    replayed to the provider in this turn's follow-up requests and never shown as the answer.
    """

    content: str
    tool_calls: list[ModelToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    reasoning: str = ""

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)

    @property
    def complete(self) -> bool:
        """True when the turn may execute tools: it ended normally, not cut by `length` or a filter."""
        return self.finish_reason in ("stop", "tool_calls")

    def assistant_message(self) -> dict[str, Any]:
        """The turn in OpenAI's wire format, to append to the run's working messages (with
        `reasoning_content` when the provider sent reasoning; only the run keeps it)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        return message
