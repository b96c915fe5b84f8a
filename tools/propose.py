"""The flow of a call that carries no decision: a gated call is proposed to a human (a
confirmation request, audited CONFIRMATION_REQUIRED), an ungated one runs now
(tools.execution). Also `waiting`, the one place a waiting call's answer is built.

Runs inside the caller's transaction (the run's step); the request is created in a savepoint.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction

from approvals import proposal
from approvals.models import ConfirmationRequest
from tools import approval_context
from tools.access import refusal_message, tool_access
from tools.call_audit import CallAudit, CallStopped
from tools.calls import CallOutcome, CheckedCall, PendingConfirmation, ToolCall
from tools.context import ToolContext
from tools.errors import ToolBusinessError, ToolPermissionDenied
from tools.execution import Flow, execute, finish
from tools.idempotency import idempotency_peek
from tools.models import Tool
from tools.policy import EffectivePolicy
from tools.registry import ToolSpec
from tools.results import ToolResult
from tools.selectors import tool_available_to_tenant


class Proposal(Flow):
    """A call without a decision: refused checks are denials the model (or the caller) hears."""

    def tool_not_offered(self, ctx: ToolContext, call: ToolCall) -> None:
        """Raise for a call of a tool not offered to this user: ToolPermissionDenied when the tenant
        has it (naming what the user lacks, from their own grants only), else stop NOT_FOUND."""
        if call.name and tool_available_to_tenant(name=call.name, tenant_id=ctx.tenant_id):
            message = refusal_message(tool_access(user=ctx.user, tool=Tool.objects.get(name=call.name)))
            self.audit.deny("PERMISSION_DENIED", message)
            raise ToolPermissionDenied(message)
        raise CallStopped(self.audit.stop("NOT_FOUND", ToolResult.failure(
            "TOOL_NOT_FOUND", f"no tool named {call.name[:100]!r} is available; use only the offered tools")))

    def permission_missing(self, spec: ToolSpec) -> None:
        """Raise ToolPermissionDenied (audited) for a user without the tool's permission."""
        message = (f"you may not use the tool {spec.name}: missing the permission {spec.permission}; ask your "
                   f"tenant administrator to grant it / 您无权使用工具 {spec.name}：缺少权限 {spec.permission}，"
                   "请联系租户管理员授予")
        self.audit.deny("PERMISSION_DENIED", message)
        raise ToolPermissionDenied(message)

    def shares_turn(self, policy: EffectivePolicy) -> bool:
        """An identical gated call of the same turn shares this one's request and outcome."""
        return policy.gated

    def run(self, checked: CheckedCall) -> CallOutcome:
        """Propose a gated call (or answer it from the record of the same finished action); run an
        ungated one now."""
        if not checked.policy.gated:
            return execute(checked, self.audit, self)
        audit = self.audit
        # Repeating a finished action answers from its record instead of asking a human.
        earlier = idempotency_peek(tenant_id=checked.ctx.tenant_id, key=checked.key, arguments_hash=audit.hash) \
            if checked.key else None
        if earlier is not None:
            return finish(checked.spec, checked.call, earlier, audit)
        self._precheck(checked)
        # A savepoint: a request whose approval context fails (it wrote: ReadOnlyViolation) leaves
        # nothing behind, whatever encloses it; confirmation_create inside needs none of its own.
        with transaction.atomic():
            if checked.ctx.fence is not None:
                checked.ctx.fence()  # a run cancelled or taken over meanwhile asks nobody (raises FenceLost)
            return self._request_confirmation(checked)

    def _precheck(self, checked: CheckedCall) -> None:
        """The tool's read-only precheck before a human is asked: a call that cannot succeed is
        answered with the business code now (audited REFUSED) and mints no confirmation."""
        if checked.spec.precheck is None:
            return
        try:
            checked.spec.precheck(checked.ctx, checked.params)
        except ToolBusinessError as error:
            raise CallStopped(self.audit.stop("REFUSED", ToolResult.failure(error.code, error.message)))

    def _request_confirmation(self, checked: CheckedCall) -> CallOutcome:
        ctx, call, spec, params, policy, audit = (checked.ctx, checked.call, checked.spec, checked.params,
                                                  checked.policy, self.audit)
        shown = approval_context.capture(ctx, spec, params)  # read-only, tenant-scoped, masked
        request, token = proposal.confirmation_create(
            tenant_id=ctx.tenant_id, user_id=ctx.user_id, conversation_id=ctx.conversation_id, run_id=ctx.run_id,
            tool_call_id=call.id, tool_id=checked.row.pk, tool_name=spec.name, arguments=checked.normalized,
            masked_arguments=audit.masked, arguments_hash=audit.hash, summary=spec.summary(params, shown["facts"]),
            risk=policy.risk, policy=policy.policy, quorum=policy.quorum, ttl_seconds=policy.ttl_seconds,
            context_excerpt=ctx.excerpt(), idempotency_key=checked.key or "",
            business_object=spec.business_object(params) if spec.business_object else "",
            approval_context=shown,
            policy_version=checked.gate.version if checked.gate else None,
            policy_rules=checked.gate.rules if checked.gate else (),
        )
        return waiting(call, request, token, audit)


def waiting(call: ToolCall, request: ConfirmationRequest, token: str | None, audit: CallAudit, *,
            reason: str = "", regated: dict[str, Any] | None = None) -> CallOutcome:
    """The waiting outcome of `call` for confirmation `request` (audited CONFIRMATION_REQUIRED).

    token: the raw requester token minted for it, else None. reason / regated: why a decided call
    waits again (Regate.told / Regate.notice).
    """
    pending = PendingConfirmation.from_request(request, tool_call_id=call.id, token=token, reason=reason,
                                               regated=regated)
    message = f"waiting for {pending.needs} to confirm: {request.summary}"
    if reason:
        message = f"{reason}; {message}"
    result = ToolResult.failure("CONFIRMATION_REQUIRED", message, data=pending.public())
    audit.confirmation_id = request.pk
    audit.write("CONFIRMATION_REQUIRED", result)
    return CallOutcome(call, result, pending=pending)
