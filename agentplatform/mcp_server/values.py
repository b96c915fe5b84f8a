"""The values the MCP service and its transport share: who calls (Principal), what a call answers
(Answer), and the error of an unknown call id (CallNotFound). Plain data, no queries; imported
from agentplatform.mcp_server.calls by the transport."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from core.redaction.text import mask_text
from core.text import storable_text

# Fixed namespace of the per-key conversation ids (uuid5): never change it, retries match on it.
KEY_CONVERSATIONS = uuid.UUID("5b0b7f8e-6a53-4d0e-9c1e-0d5c2f1f7a27")


class CallNotFound(Exception):
    """An MCP call (task) id unknown to this principal: another key's, another tenant's, or none.
    The transport answers it as JSON-RPC invalid params, naming nothing of another's."""

    code = "TASK_NOT_FOUND"


@dataclass(frozen=True)
class Principal:
    """Who calls over MCP, from the server only: the API key's user (tenant from the user row) and
    the key itself (agentplatform.api.models.ApiKey). `client`: the MCP clientInfo
    "name/version", or "" (recorded, never trusted)."""

    user: Any
    api_key: Any
    client: str = ""

    @property
    def tenant_id(self) -> int:
        return self.user.tenant_id

    @property
    def conversation_id(self) -> uuid.UUID:
        """The conversation every call of this key is bound to (a retry's binding matches)."""
        return uuid.uuid5(KEY_CONVERSATIONS, str(self.api_key.public_id))

    def channel(self) -> dict[str, str]:
        """The audit rows' channel: {"name": "mcp", "api_key", "api_key_id", "client"}."""
        # clientInfo is the client's own text: NUL or a lone surrogate would make every audit row
        # (jsonb) of the session fail on PostgreSQL (core.text), and it is masked as any free text.
        return {"name": "mcp", "api_key": storable_text(self.api_key.name), "api_key_id": str(self.api_key.public_id),
                "client": mask_text(storable_text(self.client))[:200]}


@dataclass(frozen=True)
class Answer:
    """What a tools/call (or a task) answers.

    state: "completed" (the tool ran; `result` is its masked result), "failed" (refused, rejected,
    expired, withdrawn, or the tool failed; `result` names the code and reason), or "pending"
    (waiting for a decision; `pending` says on what). result: ToolResult.to_dict() shape
    {"success", "code", "message", "data"}, masked. pending: {"request_id", "needs" ("requester" |
    "approvers"), "quorum", "approvals" (approvals so far), "expires_at" (ISO 8601), "url" (the
    request's page), "summary", "risk", "rules"} or None. call_id: the McpCall id (the MCP task id)
    of a gated call, else None. edited: the approver's edit of the arguments that ran
    ({"changes": [...], "edited_by": [...]}) or None. replayed: True when the answer is the stored
    one of a call that already ended (an idempotent replay: nothing ran now; `result` then also
    carries "idempotent_replay": true).
    """

    state: str
    result: dict[str, Any]
    pending: dict[str, Any] | None = None
    call_id: uuid.UUID | None = None
    edited: dict[str, Any] | None = field(default=None)
    replayed: bool = False

    @property
    def waits_on_requester(self) -> bool:
        """True when the call waits for the requester's own confirmation (an elicitation form)."""
        return self.state == "pending" and bool(self.pending) and self.pending.get("needs") == "requester"
