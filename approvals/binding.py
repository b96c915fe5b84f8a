"""The binding of a gated call: what a confirmation request is valid for, and nothing else."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallBinding:
    """The call a confirmation request is bound to: tenant, requester, conversation, tool and, once
    known, the canonical SHA-256 of the arguments ("" while unknown). A request is decided,
    consumed or ended only from the call with this binding: a token replayed in another
    conversation, by another user or for other arguments matches nothing."""

    tenant_id: int
    user_id: int
    conversation_id: uuid.UUID
    tool_name: str
    arguments_hash: str = ""

    def where(self) -> dict[str, Any]:
        """The field conditions on ConfirmationRequest that match only this binding (the arguments
        hash only once known)."""
        where = {"tenant_id": self.tenant_id, "user_id": self.user_id, "conversation_id": self.conversation_id,
                 "tool_name": self.tool_name}
        if self.arguments_hash:
            where["arguments_hash"] = self.arguments_hash
        return where

    def exact_where(self) -> dict[str, Any]:
        """As `where`, with the arguments hash always a condition: consuming needs the very call,
        so an empty hash matches no stored request instead of any."""
        return {**self.where(), "arguments_hash": self.arguments_hash}
