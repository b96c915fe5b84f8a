"""The flow of a call that carries a decided confirmation (a resumed run): the call is judged
again against what is in force now, and a refused check ends the request REFUSED instead of
raising; the decision is consumed inside the executing transaction (tools.execution), its outcome
recorded on it, and a failed attempt spends it.

Runs inside the caller's transaction (the run's step). Every change of the request locks the
run's row first (through the context's fence), in the order run_cancel and a consumption take
run and request, so none of them deadlock.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction

from approvals import consumption, unconsumed
from approvals.errors import ConfirmationRegated, ConsumeRefused
from approvals.models import ConfirmationRequest
from policies.limits import LimitsVerdict, limits_judge, limits_release, limits_reserve
from tools.call_audit import CallAudit, CallStopped
from tools.calls import CallOutcome, CheckedCall, ToolCall
from tools.context import FenceLost, ToolContext
from tools.errors import ToolBusinessError
from tools.execution import Flow, call_limits, execute, limits_gate
from tools.idempotency import Outcome, idempotency_peek
from tools.policy import EffectivePolicy
from tools.propose import UNKNOWN, waiting
from tools.registry import ToolSpec
from tools.results import ToolResult
from tools.selectors import tool_unavailable_reason


class Consumption(Flow):
    """A call that consumes the confirmation request `confirmation_id`."""

    _limited = False
    _judged: tuple | None = None

    def __init__(self, audit: CallAudit, confirmation_id: Any) -> None:
        super().__init__(audit)
        self.confirmation_id = confirmation_id

    # -- the shared checks, refused at consume time -----------------------------------------------

    def tool_not_offered(self, ctx: ToolContext, call: ToolCall) -> None:
        """Decided earlier, no longer offered now: refuse the request, saying why (distinct from a
        tool that never existed). Raises CallStopped."""
        code, message = tool_unavailable_reason(name=call.name, user=ctx.user, tenant_id=ctx.tenant_id)
        raise CallStopped(self.refuse(ToolResult.failure(code, message),
                                      decision="NOT_FOUND" if code == "TOOL_NOT_FOUND" else "DENIED"))

    def permission_missing(self, spec: ToolSpec) -> None:
        """The requester lost the tool's permission since the decision: refuse the request."""
        raise CallStopped(self.refuse(ToolResult.failure(
            "PERMISSION_DENIED", f"the requester no longer holds {spec.permission}")))

    def shares_turn(self, policy: EffectivePolicy) -> bool:
        """A duplicate of a consumed call in the same turn is answered from it."""
        return True

    def run(self, checked: CheckedCall) -> CallOutcome:
        """Consume the decision and execute the call (tools.execution)."""
        return execute(checked, self.audit, self)

    def refuse(self, result: ToolResult, *, decision: str = "DENIED") -> ToolResult:
        """The call is refused at consume time: the request ends REFUSED with the code, and the
        refusal is audited (after any rollback). A request that was no longer CONFIRMED because it
        already ran (a recovery after the worker died past its commit) is answered with what ran,
        never with a refusal (it would tell the model nothing was done).

        Only the request bound to this call (tenant, requester, conversation, tool, arguments) is
        ended: a consumer with another binding is refused without burning it. On a run this
        process lost the request is left to the run's new holder or its cancel."""
        audit = self.audit
        audit.confirmation_id = self.confirmation_id
        if self._hold_run():
            if not unconsumed.confirmation_refuse(request_id=self.confirmation_id, code=result.code,
                                                 message=result.message, **audit.binding()):
                ran = self._what_ran()
                if ran is not None:
                    return ran
        return audit.stop(decision, result)

    # -- the executing path -----------------------------------------------------------------------

    def fences(self, spec: ToolSpec) -> bool:
        """A decision is spent only by the run's holder, even for a read-only tool."""
        return True

    def consume(self, checked: CheckedCall) -> None:
        """Consume the request against the policy in force now (the bundle's limits over history
        judged again first, `_limits`), then run the tool's precheck again (a call that can no
        longer succeed is refused with its business code)."""
        audit, gate = self.audit, checked.gate
        verdict = self._limits(checked)
        if verdict is not None:
            gate = limits_gate(gate, verdict)
            audit.policy, audit.policy_version, audit.policy_rules = gate.policy.policy, gate.version, gate.rules
            if gate.denied:
                raise ConsumeRefused(gate.reason, code=gate.code)
        policy = gate.policy if gate is not None else checked.policy
        audit.revision = consumption.confirmation_consume(
            request_id=self.confirmation_id, tenant_id=checked.ctx.tenant_id, user_id=checked.ctx.user_id,
            conversation_id=checked.ctx.conversation_id, tool_name=checked.spec.name, arguments_hash=audit.hash,
            policy=policy.policy, quorum=policy.quorum, risk=policy.risk, ttl_seconds=policy.ttl_seconds,
            policy_version=gate.version if gate else None,
            policy_rules=gate.rules if gate else (),
        )
        if verdict is not None:
            limits_reserve(verdict, confirmation_id=self.confirmation_id, tool_call_id=checked.call.id)
        if checked.spec.precheck is not None:
            try:
                checked.spec.precheck(checked.ctx, checked.params)
            except ToolBusinessError as error:
                raise ConsumeRefused(error.message, code=error.code) from None

    def record_outcome(self, outcome: Outcome) -> None:
        """Record the execution's code on the request; a conflict is not an execution, so the
        decision is not spent on it (raises ConsumeRefused, rolling the consumption back). A call
        that did not run and succeed here (a business failure, an answer from an earlier record) is
        no longer counted by its limits."""
        if outcome.kind not in ("EXECUTED", "IDEMPOTENT_HIT"):
            raise ConsumeRefused(outcome.result.message, code=outcome.result.code)
        consumption.confirmation_record_outcome(
            request_id=self.confirmation_id,
            code=outcome.result.code if outcome.kind == "EXECUTED" else "IDEMPOTENT_HIT")
        if self._limited and not (outcome.kind == "EXECUTED" and (outcome.result.success
                                                                  or outcome.result.code == UNKNOWN)):
            limits_release(confirmation_id=self.confirmation_id)  # it may have run: OUTCOME_UNKNOWN stays counted

    def regated(self, call: ToolCall, regated: ConfirmationRegated) -> CallOutcome:
        """The policy became stricter after the decision: the request waits again, and so does the
        call (or it is told the request was decided elsewhere meanwhile)."""
        request = unconsumed.confirmation_regate(request_id=self.confirmation_id, regate=regated.regate)
        if request is None:
            return CallOutcome(call, self.audit.stop("DENIED", ToolResult.failure(
                "CONFIRMATION_INVALID", "the confirmation was decided elsewhere meanwhile")))
        self._reserve_waiting()
        return waiting(call, request, None, self.audit, reason=regated.regate.told(),
                       regated=regated.regate.notice(tool=request.tool_name))

    def spend_on_failure(self, attempted: bool, code: str, error_name: str) -> None:
        """Close the confirmation of a call whose attempt raised (the consumption rolled back with
        it, leaving the request CONFIRMED): the run answers the call with the failure and moves on,
        so nothing could ever consume the request again, and it must not stay CONFIRMED ("approved,
        waiting to run") on a finished run (docs/decisions.md). Entered the tool: CONSUMED with the
        code (the decision was spent on an attempt that failed; approvers see FAILED (code)); failed
        before the tool was entered: REFUSED with the code (nothing ran). No-op for a request bound
        to another call, and on a run this process lost."""
        if not self._hold_run():
            return
        if self._limited:
            limits_release(confirmation_id=self.confirmation_id)
        if attempted:
            unconsumed.confirmation_spend_failed(request_id=self.confirmation_id, code=code, **self.audit.binding())
        else:
            unconsumed.confirmation_refuse(request_id=self.confirmation_id, code=code,
                                          message=f"the call failed before the tool ran ({error_name})",
                                          **self.audit.binding())

    # -- limits over history (policies.limits) -----------------------------------------------------

    def _limits(self, checked: CheckedCall) -> LimitsVerdict | None:
        """The bundle's limits in force now for the call, judged again under their keys' locks
        (None: none apply). Each limit counts only what was reserved before this call's own
        reservation for it, so the call is not counted twice and calls proposed after it (judged
        with it counted) do not count against it: a limit tightened while the request waited
        re-gates or refuses it; an unchanged one reaches the verdict it reached at proposal, which
        the decision satisfies. A limit the call has no reservation for (added while it waited)
        counts the whole window and reserves the call at the end."""
        limits = call_limits(checked)
        self._limited = bool(limits)
        if not limits:
            return None
        ctx = checked.ctx
        self._judged = (ctx, checked.spec.name, limits, checked.policy_arguments or checked.normalized, checked.call.id)
        return limits_judge(tenant_id=ctx.tenant_id, user_id=ctx.user_id, tool_name=checked.spec.name, limits=limits,
                            arguments=self._judged[3], reserve=True, confirmation_id=self.confirmation_id)

    def _reserve_waiting(self) -> None:
        """The request waits again after a regate: the consumption's rollback took the reservations
        this consumption wrote for limits added while it waited; write them again, linked to it."""
        if self._judged is None:
            return
        ctx, tool_name, limits, arguments, call_id = self._judged
        with transaction.atomic():
            verdict = limits_judge(tenant_id=ctx.tenant_id, user_id=ctx.user_id, tool_name=tool_name, limits=limits,
                                   arguments=arguments, reserve=True, confirmation_id=self.confirmation_id)
            if not verdict.denied and any(j.own is None for j in verdict.judged):
                limits_reserve(verdict, confirmation_id=self.confirmation_id, tool_call_id=call_id)

    # -- helpers ----------------------------------------------------------------------------------

    def _hold_run(self) -> bool:
        """Lock the run's row through the context's fence before its request is changed. False
        when this process no longer holds the run (the step will roll back); True without a fence
        (a call outside a run)."""
        fence = self.audit.ctx.fence
        if fence is None:
            return True
        try:
            fence()
        except FenceLost:
            return False
        return True

    def _what_ran(self) -> ToolResult | None:
        """The stored result of a CONSUMED request's execution (from its idempotency record, or
        its outcome code for keyless tools), audited IDEMPOTENT_HIT; None when it did not run, or
        when the request is not this call's tenant's, requester's and conversation's (nothing of
        another's is told)."""
        ctx, audit = self.audit.ctx, self.audit
        request = ConfirmationRequest.objects.filter(pk=self.confirmation_id, tenant_id=ctx.tenant_id,
                                                     user_id=ctx.user_id, conversation_id=ctx.conversation_id).first()
        if request is None or request.status != ConfirmationRequest.Status.CONSUMED:
            return None
        earlier = idempotency_peek(tenant_id=request.tenant_id, key=request.idempotency_key,
                                   arguments_hash=request.arguments_hash) if request.idempotency_key else None
        if earlier is not None:
            result = earlier.result
        else:
            code = request.outcome_code or "OK"
            result = (ToolResult.ok(None, "this call already ran") if code == "OK"
                      else ToolResult.failure(code, "this call already ran and failed"))
        audit.hash, audit.masked, audit.revision = request.arguments_hash, request.masked_arguments, request.revision
        audit.note_edits()
        return audit.stop("IDEMPOTENT_HIT", result)
