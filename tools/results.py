"""ToolResult: the envelope every tool call returns to the model.

Never null, never a bare string: `{success, code, message, terminal, retryable, data}`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolResult:
    """The result of one governed tool call.

    success: the business action succeeded. code: stable code (OK, INVALID_ARGUMENTS, ...).
    terminal: the model should not repeat this call. retryable: a retry may succeed.
    data: structured, masked, size-limited result (dict) or None.
    """

    success: bool
    code: str
    message: str
    terminal: bool = True
    retryable: bool = False
    data: Any = field(default=None)

    @classmethod
    def ok(cls, data: Any, message: str = "OK") -> "ToolResult":
        return cls(True, "OK", message, True, False, data)

    @classmethod
    def failure(cls, code: str, message: str, *, retryable: bool = False, terminal: bool = True,
                data: Any = None) -> "ToolResult":
        return cls(False, code, message, terminal, retryable, data)

    def to_dict(self) -> dict[str, Any]:
        """The envelope as a plain dict. `data` is shared, not copied (a result is not changed after
        it is built; `dataclasses.asdict` deep-copied it, the largest Python cost of a governed call)."""
        return {"success": self.success, "code": self.code, "message": self.message, "terminal": self.terminal,
                "retryable": self.retryable, "data": self.data}

    def to_json(self) -> str:
        """Compact JSON for the tool message content sent to the model (built once per result)."""
        cached = self.__dict__.get("_json")
        if cached is None:
            cached = json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)
            object.__setattr__(self, "_json", cached)  # frozen: a cache, not a field
        return cached

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ToolResult":
        return cls(
            success=bool(raw["success"]), code=str(raw["code"]), message=str(raw.get("message", "")),
            terminal=bool(raw.get("terminal", True)), retryable=bool(raw.get("retryable", False)),
            data=raw.get("data"),
        )
