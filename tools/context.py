"""ToolContext: server-side facts about a tool call that the model never sees or sets."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ToolContext:
    """Identity and scope of one run, built only on the server: the model never sets
    tenant or user.

    tenant / user: the authenticated principal (model instances). conversation_id, run_id: UUIDs.
    request_id: the inbound request's id (for audit correlation). offered: names of the tools
    offered in this run; a call to any other name is not resolved. confirmations: on resume,
    tool_call_id -> ConfirmationRequest id to consume. conversation_excerpt: recent user text shown
    to approvers, or a zero-argument callable returning it, called only when a confirmation is
    requested (read it with `excerpt()`). fence: a zero-argument callable the pipeline calls inside
    the transaction that consumes a confirmation or claims an idempotency record, before anything
    runs; the runtime's fence raises when this process no longer holds the run (its lease was taken
    over), so a stale holder can never execute (docs/decisions.md), and otherwise returns the lease
    it checked (text), which the execution's audit row names with this process
    (`AuditEvent.execution`). Never carries a raw confirmation token.
    """

    tenant: Any
    user: Any
    conversation_id: uuid.UUID
    run_id: uuid.UUID | None = None
    request_id: str = ""
    offered: frozenset[str] = field(default_factory=frozenset)
    confirmations: dict[str, uuid.UUID] = field(default_factory=dict)
    conversation_excerpt: Any = ""
    # The tools resolved for this run (name -> (ToolSpec, Tool row)), set by ToolCallingManager.resolve;
    # calls that consume no confirmation resolve against it instead of querying again.
    offered_tools: Any = field(default=None, compare=False, repr=False)
    fence: Any = field(default=None, compare=False, repr=False)
    # Tool search (tools.search): names of the tools the run's `tool_search` calls returned; they are
    # sent to the model from then on. Mutable on purpose: shared by the contexts derived in a run.
    discovered: set = field(default_factory=set, compare=False, repr=False)
    # How the call arrived when not through the platform's own loop, written on every audit row of
    # the call (AuditEvent.channel): {"name": "mcp", "api_key": <name>, "api_key_id": <public id>,
    # "client": <MCP clientInfo "name/version">}; None for the platform's chat and API runs.
    channel: dict | None = field(default=None, compare=False)

    @property
    def tenant_id(self) -> int:
        return self.tenant.pk

    @property
    def user_id(self) -> int:
        return self.user.pk

    @property
    def consumes(self) -> bool:
        """True when this context carries decided confirmations to consume (a resumed run): the
        tools offered are then queried afresh, so permissions, tenant policy and risk are judged
        at consume time, not only when the calls were requested."""
        return bool(self.confirmations)

    def excerpt(self) -> str:
        """The conversation excerpt for approvers (loaded now when it was given as a callable)."""
        value = self.conversation_excerpt
        return value() if callable(value) else value

    def with_offered(self, names: frozenset[str]) -> "ToolContext":
        return replace(self, offered=names, offered_tools=None)

    def with_confirmations(self, confirmations: dict[str, uuid.UUID]) -> "ToolContext":
        return replace(self, confirmations=dict(confirmations), offered_tools=None)


class FenceLost(Exception):
    """Raised by a ToolContext's `fence` when this process no longer holds the run; the pipeline
    propagates it (nothing executes) and the caller stops. `code` is the stable code to report."""

    code = "RUN_TAKEN_OVER"
