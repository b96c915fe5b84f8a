"""Governed calls over MCP: the one service the MCP transport (agentplatform.mcp_server.server)
calls for `tools/call`, `tasks/get`, `tasks/result` and the requester's elicitation answer.

Every call runs through tools.governed_call as the API key's user, in that user's tenant, with the
key's conversation (`Principal.conversation_id`, one per key) and `ToolContext.channel` naming MCP
and the key on every audit row. A gated call is recorded as an McpCall; a later call of the same
tool with the same normalised arguments under the same key within MCP_RETRY_WINDOW_SECONDS is the
same call: "still pending" (never a second request), then the one execution once approved, then
the stored answer (docs/mcp.md).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

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
        return {"name": "mcp", "api_key": self.api_key.name, "api_key_id": str(self.api_key.public_id),
                "client": self.client[:200]}


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
    ({"changes": [...], "edited_by": [...]}) or None.
    """

    state: str
    result: dict[str, Any]
    pending: dict[str, Any] | None = None
    call_id: uuid.UUID | None = None
    edited: dict[str, Any] | None = field(default=None)

    @property
    def waits_on_requester(self) -> bool:
        """True when the call waits for the requester's own confirmation (an elicitation form)."""
        return self.state == "pending" and bool(self.pending) and self.pending.get("needs") == "requester"


def call_tool(principal: Principal, *, name: str, arguments: Any, request_id: str = "") -> Answer:
    """Run one MCP tools/call as a governed call. `arguments`: the decoded JSON arguments (any type:
    a non-object is refused INVALID_ARGUMENTS by the pipeline). request_id: the inbound HTTP
    request's id for audit correlation. Returns the Answer; raises ToolPermissionDenied (a tool the
    user may not use, audited) and the system errors tools.execution.propagates names."""
    raise NotImplementedError  # built in this calls branch


def call_state(principal: Principal, *, call_id: uuid.UUID) -> Answer:
    """The state of the gated call `call_id` (tasks/get, tasks/result, a retry): executes it now
    when it was approved and has not run (exactly once, whoever asks first). Raises CallNotFound."""
    raise NotImplementedError  # built in this calls branch


def requester_answer(principal: Principal, *, call_id: uuid.UUID, confirm: bool) -> Answer:
    """The requester's own answer to the confirmation of `call_id` (an elicitation form accepted
    with confirm=True, or declined): confirms and runs it, or cancels the request. Raises
    CallNotFound; a call that does not wait on its requester answers its current state."""
    raise NotImplementedError  # built in this calls branch
