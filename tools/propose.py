"""The flow of a call that carries no decision: a gated call is proposed to a human (a
confirmation request, audited CONFIRMATION_REQUIRED), an ungated one runs now
(tools.execution). Also `waiting`, the one place a waiting call's answer is built.

A call the tenant's bundle sets limits over history on (policies.limits) is judged under the
limits' key locks and reserved in the same transaction before it runs or its request is created:
an exceeded limit denies it (LIMIT_EXCEEDED) or raises its gate to approvers, and the request
stores the gate the limits raised and their ids.

Runs inside the caller's transaction (the run's step); the request is created in a savepoint.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.db import transaction

from approvals import proposal
from approvals.models import ConfirmationRequest
from core.sql.select import shared_reads
from core.sql.transactions import transaction_usable
from policies.documents import Limit
from policies.limits import LimitsVerdict, limits_judge, limits_release, limits_reserve
from policies.shadow import shadow_record
from tools import approval_context
from tools.access import refusal_message, tool_access
from tools.call_audit import CallAudit, CallStopped
from tools.calls import CallOutcome, CheckedCall, PendingConfirmation, ToolCall
from tools.context import ToolContext
from tools.errors import ToolBusinessError, ToolPermissionDenied
from tools.execution import Flow, call_limits, execute, finish, limits_gate
from tools.gate import Gate
from tools.idempotency import Outcome, idempotency_peek
from tools.models import Tool
from tools.policy import EffectivePolicy
from tools.registry import ToolSpec
from tools.results import ToolResult
from tools.selectors import tool_available_to_tenant

UNKNOWN = "OUTCOME_UNKNOWN"  # a result that may have run (a remote tool reached, no answer)


class Proposal(Flow):
    """A call without a decision: refused checks are denials the model (or the caller) hears."""

    _shadow_noted = False
    _ran = False

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
        ungated one now. A call the bundle's limits over history apply to is judged and reserved
        first (`_run_limited`)."""
        limits = call_limits(checked)
        if limits:
            return self._run_limited(checked, limits)
        if not checked.policy.gated:
            return execute(checked, self.audit, self)
        # The precheck and the approval context read the same row (the order a cancellation
        # names) in the same transaction, a few statements apart: the context's reading is
        # answered from the precheck's. Both stretches are read-only; the fence's lock and the
        # request's writes are not shared.
        reads: dict = {}
        earlier = self._answered_or_prechecked(checked, reads)
        if earlier is not None:
            return earlier
        # A savepoint: a request whose approval context fails (it wrote: ReadOnlyViolation) leaves
        # nothing behind, whatever encloses it; confirmation_create inside needs none of its own.
        with transaction.atomic():
            if checked.ctx.fence is not None:
                checked.ctx.fence()  # a run cancelled or taken over meanwhile asks nobody (raises FenceLost)
            return self._request_confirmation(checked, reads)

    def _answered_or_prechecked(self, checked: CheckedCall, reads: dict | None = None) -> CallOutcome | None:
        """Before a human is asked: repeating a finished action answers from its record (returned),
        and the tool's precheck refuses a call that cannot succeed (raises CallStopped). None: ask.
        reads: where the precheck's rows are kept for the approval context (`_request_confirmation`)."""
        earlier = idempotency_peek(tenant_id=checked.ctx.tenant_id, key=checked.key, arguments_hash=self.audit.hash) \
            if checked.key else None
        if earlier is not None:
            return finish(checked.spec, checked.call, earlier, self.audit)
        self._precheck(checked, reads)
        return None

    # -- limits over history (policies.limits) -----------------------------------------------------

    def _run_limited(self, checked: CheckedCall, limits: list[Limit]) -> CallOutcome:
        """Judge the call's limits under their keys' locks and reserve it in the same transaction:
        an ungated call within its limits is reserved (committed before it runs, released if it
        does not run); an exceeded `approval` limit makes it a proposal, judged and reserved again
        with its request, so the gate stored is the one the limits raised; an exceeded `deny` limit
        refuses it with LIMIT_EXCEEDED. Nothing is reserved for a denied call."""
        if not checked.policy.gated:
            rows: list[int] = []
            with transaction.atomic():
                verdict = self._judge(checked, limits)
                gate = limits_gate(checked.gate, verdict)
                if not gate.denied and not gate.policy.gated:
                    rows = limits_reserve(verdict, tool_call_id=checked.call.id)
            self._note(gate, verdict)
            if gate.denied:
                raise CallStopped(self._refused(gate))
            checked = replace(checked, gate=gate, policy=gate.policy)
            if not gate.policy.gated:
                return self._run_now(checked, rows)
        earlier = self._answered_or_prechecked(checked)
        if earlier is not None:
            return earlier
        with transaction.atomic():
            if checked.ctx.fence is not None:
                checked.ctx.fence()
            verdict = self._judge(checked, limits)
            gate = limits_gate(checked.gate, verdict)
            if not gate.denied:
                self._note(gate, verdict)
                outcome = self._request_confirmation(replace(checked, gate=gate, policy=gate.policy))
                limits_reserve(verdict, confirmation_id=outcome.pending.confirmation_id, tool_call_id=checked.call.id)
                return outcome
        self._note(gate, verdict)
        raise CallStopped(self._refused(gate))

    def _judge(self, checked: CheckedCall, limits: list[Limit]) -> LimitsVerdict:
        ctx = checked.ctx
        return limits_judge(tenant_id=ctx.tenant_id, user_id=ctx.user_id, tool_name=checked.spec.name, limits=limits,
                            arguments=checked.policy_arguments or checked.normalized, reserve=True)

    def _note(self, gate: Gate, verdict: LimitsVerdict) -> None:
        """The gate the limits left is the call's (audited); shadow limits' verdicts are recorded
        once per call (policies.shadow), never enforced."""
        audit = self.audit
        audit.policy, audit.policy_version, audit.policy_rules = gate.policy.policy, gate.version, gate.rules
        if verdict.shadow and not self._shadow_noted:
            self._shadow_noted = True
            ctx = audit.ctx
            shadow_record(tenant_id=ctx.tenant_id, version=gate.version or 0, verdicts=verdict.shadow,
                          tool_name=verdict.tool_name, user_id=ctx.user_id, tool_call_id=audit.call.id,
                          conversation_id=ctx.conversation_id)

    def _refused(self, gate: Gate) -> ToolResult:
        return self.refuse(ToolResult.failure(gate.code, gate.reason, data={"rules": list(gate.rules)}))

    def _run_now(self, checked: CheckedCall, rows: list[int]) -> CallOutcome:
        """Run an ungated call whose reservation `rows` is committed (or held by the enclosing
        transaction); the rows are released unless the tool really ran and succeeded."""
        self._ran = False
        try:
            outcome = execute(checked, self.audit, self)
        except BaseException:
            if transaction_usable():
                limits_release(ids=rows)
            raise
        if not self._ran:
            limits_release(ids=rows)
        return outcome

    def record_outcome(self, outcome: Outcome) -> None:
        """Note whether the tool really ran and succeeded (a failure, a conflict or an answer from
        an earlier record is not a call its limits count). A call that may have run without an
        answer (OUTCOME_UNKNOWN: a remote tool reached, no reply) stays counted: releasing it would
        let the next call past the cap while the first may have moved the money."""
        self._ran = outcome.kind == "EXECUTED" and (outcome.result.success or outcome.result.code == UNKNOWN)

    def _precheck(self, checked: CheckedCall, reads: dict | None = None) -> None:
        """The tool's read-only precheck before a human is asked: a call that cannot succeed is
        answered with the business code now (audited REFUSED) and mints no confirmation. reads:
        where its rows are kept (core.sql.select.shared_reads), None: not kept."""
        if checked.spec.precheck is None:
            return
        try:
            with shared_reads(reads):
                checked.spec.precheck(checked.ctx, checked.params)
        except ToolBusinessError as error:
            raise CallStopped(self.audit.stop("REFUSED", ToolResult.failure(error.code, error.message)))

    def _request_confirmation(self, checked: CheckedCall, reads: dict | None = None) -> CallOutcome:
        """Ask a human: the approval context, the request and its token, the waiting outcome.
        reads: the rows the precheck read (core.sql.select.shared_reads), shared with the context."""
        ctx, call, spec, params, policy, audit = (checked.ctx, checked.call, checked.spec, checked.params,
                                                  checked.policy, self.audit)
        with shared_reads(reads):
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
