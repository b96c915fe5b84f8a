"""The audit row of one governed call: `CallAudit` collects its fields as the call's checks learn
them, and writes the row (and the call's metrics) when the call ends. It writes into whatever
transaction is open: inside the executing transaction a failed audit write undoes the call."""
from __future__ import annotations

import time
from typing import Any

from approvals.selectors import edit_provenance
from audit import events, metrics
from tools import tracing
from tools.calls import ToolCall
from tools.context import ToolContext
from tools.hashing import arguments_hash as hash_arguments
from core.redaction.fields import mask_mapping
from tools.models import Tool
from tools.results import ToolResult


class CallAudit:
    """Collects the audit fields of one call as the pipeline learns them; `write` records them."""

    def __init__(self, ctx: ToolContext, call: ToolCall, started: float) -> None:
        """started: `time.perf_counter()` when the call began (the row's duration is measured from it)."""
        self.ctx, self.call, self.started = ctx, call, started
        self.hash, self.masked, self.policy = "", None, ""
        self.idempotency_key, self.business_result_id = "", ""
        self.confirmation_id = None
        self.owner, self.version = "", ""
        self.execution = None  # set once the execution passed its fence (AuditEvent.execution)
        self.edits: dict[str, Any] | None = None
        self.revision: int | None = None  # of the consumed request, when known (0: never edited)
        self.policy_version: int | None = None  # the tenant's policy bundle version that judged it
        self.policy_rules: tuple[str, ...] = ()  # the rules and limits that set its gate or denied it

    def note_edits(self) -> None:
        """Name in this call's rows who edited it before it ran, beside the requester (the row's
        actor): an approver's edit is part of what ran. Only for a call that consumed a request;
        no query for one known to be unedited (the common case, on the governed call's path)."""
        if self.confirmation_id is not None and self.revision != 0:
            self.edits = edit_provenance(request_id=self.confirmation_id)

    def tool(self, row: Tool) -> None:
        """Record the resolved tool's owner and version in every later row of this call."""
        self.owner, self.version = row.owner, row.version

    def arguments(self, normalized: dict[str, Any]) -> None:
        """Record the validated, normalised arguments: their hash, and their masked form."""
        self.hash = hash_arguments(normalized)
        self.masked = mask_mapping(normalized)

    def binding(self) -> dict[str, Any]:
        """The binding of this call, as `approvals.confirmation_refuse` takes it: a request is
        ended only from the call it is bound to. The arguments hash is "" until the arguments were
        validated (a call refused before that is matched without it)."""
        ctx = self.ctx
        return {"tenant_id": ctx.tenant_id, "user_id": ctx.user_id, "conversation_id": ctx.conversation_id,
                "tool_name": self.call.name[:100], "arguments_hash": self.hash}

    def write(self, decision: str, result: ToolResult) -> None:
        """Write the call's audit row with `decision` and `result`, and its metrics."""
        seconds = time.perf_counter() - self.started
        masked, message = self.masked, result.message
        if self.edits is not None:
            # "_edit" is the platform's key, not an argument (docs/approvals.md): the arguments that
            # ran are the edited ones (arguments_hash), the requester's are original_arguments_hash.
            masked = {**(masked or {}), "_edit": self.edits}
            message = (f"arguments edited by {', '.join(self.edits['edited_by'])} before it ran (requested by "
                       f"{self.edits['requested_by']}): {message}")
        events.tool_call_decided(
            decision=decision, tenant_id=self.ctx.tenant_id, actor_id=self.ctx.user_id,
            tool_name=self.call.name[:100], tool_owner=self.owner, tool_version=self.version,
            status=result.code, policy_decision=self.policy,
            request_id=self.ctx.request_id, conversation_id=self.ctx.conversation_id, run_id=self.ctx.run_id,
            tool_call_id=self.call.id, arguments_hash=self.hash, masked_arguments=masked,
            confirmation_id=self.confirmation_id, idempotency_key=self.idempotency_key,
            business_result_id=self.business_result_id, duration_ms=round(seconds * 1000, 3),
            message=message, execution=self.execution, policy_version=self.policy_version,
            policy_rules=self.policy_rules, channel=self.ctx.channel,
        )
        tracing.call_decided(decision, result, masked)
        metrics.tool_finished(tool_name="_unknown" if decision == "NOT_FOUND" else (self.call.name[:100] or "-"),
                              seconds=seconds, result_bytes=len(result.to_json()), tenant_id=self.ctx.tenant_id)

    def stop(self, decision: str, result: ToolResult) -> ToolResult:
        """Write the row and return `result` (the call ends here)."""
        self.write(decision, result)
        return result

    def invalid(self, message: str, data: Any = None) -> ToolResult:
        """End the call as INVALID_ARGUMENTS with `message` (and `data`, e.g. field errors)."""
        return self.stop("INVALID", ToolResult.failure("INVALID_ARGUMENTS", message, data=data))

    def deny(self, code: str, message: str) -> None:
        """Write a DENIED row (the caller raises afterwards)."""
        self.write("DENIED", ToolResult.failure(code, message))


class CallStopped(Exception):
    """A check stopped the call with this result, already audited; the governed call answers the
    model with it (tools.governed_call)."""

    def __init__(self, result: ToolResult) -> None:
        self.result = result
