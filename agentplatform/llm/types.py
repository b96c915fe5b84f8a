"""What one model turn looks like to the agent loop, independent of streaming or not."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelToolCall:
    """One complete tool call of a finished turn. `arguments` is the raw JSON text the model sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelTurn:
    """A finished model turn.

    content: assistant text ("" when none). tool_calls: calls assembled by `index`.
    finish_reason: "stop" | "tool_calls" | "length" | "content_filter" | ... as the provider sent it.
    """

    content: str
    tool_calls: list[ModelToolCall] = field(default_factory=list)
    finish_reason: str = "stop"

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)

    @property
    def complete(self) -> bool:
        """True when the turn may execute tools: it ended normally, not cut by `length` or a filter."""
        return self.finish_reason in ("stop", "tool_calls")

    def assistant_message(self) -> dict[str, Any]:
        """The turn in OpenAI's wire format, to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


class ModelUnavailable(Exception):
    """The model endpoint failed after the bounded retries (timeouts, connection errors, 5xx, 429)."""

    code = "MODEL_UNAVAILABLE"
    retryable = True
