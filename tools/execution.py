"""Running a governed call's tool: the executing transaction (fence, the flow's consumption of a
decision, the idempotency claim, the business change, the audit row), retried whole after a
serialization failure, and what a failure becomes. Where the call goes is a strategy
(`LocalTarget`: the business function in this process; `RemoteTarget`: an MCP server's tool);
what a carried decision adds (consume it, record its outcome, spend it on a failure) comes from
the call's flow (`Flow`: tools.propose.Proposal or tools.consume.Consumption).

`execute` opens its own atomic block: inside the run's step it is a savepoint.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils.module_loading import import_string

from core import correlation
from core.sql.transactions import retry_on_serialization_failure, transaction_usable
from core.errors import PermissionDeniedError
from approvals.errors import ConfirmationExpired, ConfirmationNotConsumable, ConfirmationRegated, ConsumeRefused
from policies.documents import Limit
from policies.limits import CODE as LIMIT_EXCEEDED, LimitsVerdict
from tools.call_audit import CallAudit
from tools.calls import CallOutcome, CheckedCall, ToolCall
from tools.context import FenceLost, ToolContext
from tools.convert import limit_result
from tools.errors import ToolBusinessError
from tools.gate import Gate
from tools.idempotency import Outcome, idempotency_execute, idempotency_peek, run_action
from tools.levels import ApprovalPolicy
from tools.registry import ToolSpec
from tools.results import ToolResult

logger = logging.getLogger(__name__)


class Flow:
    """What a call's flow adds to the executing path. This base is the flow of a call that
    carries no decision: nothing to consume, record or spend. `refuse` ends the call."""

    confirmation_id: Any = None

    def __init__(self, audit: CallAudit) -> None:
        self.audit = audit

    def refuse(self, result: ToolResult, *, decision: str = "DENIED") -> ToolResult:
        """End the call with `result`, audited as `decision`; returns the result for the model."""
        return self.audit.stop(decision, result)

    def fences(self, spec: ToolSpec) -> bool:
        """Whether the execution checks the run's fence first (a write, or a decision to spend)."""
        return not spec.read_only

    def consume(self, checked: CheckedCall) -> None:
        """Spend the carried decision inside the executing transaction (none here)."""

    def record_outcome(self, outcome: Outcome) -> None:
        """Record what the execution did on the carried decision (none here)."""

    def spend_on_failure(self, attempted: bool, code: str, error_name: str) -> None:
        """Close the carried decision of a call whose attempt raised (none here)."""

    def regated(self, call: ToolCall, regated: ConfirmationRegated) -> CallOutcome:
        """The call waits again: the policy became stricter after its decision (consumption only)."""
        raise regated


def call_limits(checked: CheckedCall) -> list[Limit]:
    """The limits over history of the tenant's bundle in force for the checked call's tool
    (policies.limits), as the call's gate read them (tools.gate); [] without a bundle. No query."""
    return list(checked.gate.limits) if checked.gate is not None else []


def limits_gate(gate: Gate, verdict: LimitsVerdict) -> Gate:
    """`gate` with the limits' `verdict` applied: an exceeded `deny` limit denies (LIMIT_EXCEEDED,
    its words as the reason); an exceeded `approval` limit raises the gate to APPROVERS with its
    quorum, never lowering it. The ids that set the resulting gate are its `rules`: the limits'
    when they raised it, the rules' and the limits' together when both ask for the same gate."""
    if verdict.denied:
        return gate.raised(policy=ApprovalPolicy.DENY, quorum=0, rule_ids=verdict.rules, code=LIMIT_EXCEEDED,
                           reason=verdict.reason)
    if verdict.gate != "approval":
        return gate
    raised = gate.raised(policy=ApprovalPolicy.APPROVERS, quorum=verdict.quorum, rule_ids=verdict.rules)
    if raised is gate and gate.policy.policy == ApprovalPolicy.APPROVERS and gate.policy.quorum == verdict.quorum:
        return replace(gate, rules=tuple(dict.fromkeys(gate.rules + verdict.rules)))
    return raised


class LocalTarget:
    """A tool whose business function runs in this process, inside the executing transaction."""

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec

    def refusal(self) -> ToolResult | None:
        """Why the call cannot go out now: never, for a local tool."""
        return None

    def key(self, declared: str | None, ctx: ToolContext, call: ToolCall, confirmation_id: Any) -> str | None:
        """The call's idempotency key: the one the tool declared, or None."""
        return declared

    def run(self, ctx: ToolContext, params: Any, key: str | None) -> tuple[ToolResult, str]:
        """Run the business function; returns (its converted result, its business result id)."""
        spec = self.spec
        data = spec.execute(ctx, params)
        business_id = spec.business_result_id(data) if spec.business_result_id else ""
        return ToolResult.ok(limit_result(spec.result_converter(data))), business_id


class RemoteTarget(LocalTarget):
    """A tool an MCP server serves (`spec.remote`, mcp_sources.remote.RemoteCall): nothing is
    consumed or claimed for a call that cannot go out (server disabled, breaker open); otherwise
    the call gets a key even when the tool declares none, so a confirmed call is attempted at most
    once (docs/remote_tools.md)."""

    def refusal(self) -> ToolResult | None:
        return self.spec.remote.refusal()

    def key(self, declared: str | None, ctx: ToolContext, call: ToolCall, confirmation_id: Any) -> str | None:
        return declared or remote_key(ctx, call, self.spec, confirmation_id)

    def run(self, ctx: ToolContext, params: Any, key: str | None) -> tuple[ToolResult, str]:
        result = self.spec.remote.execute(ctx, params.model_dump(mode="json"), key=key)
        return (ToolResult.ok(limit_result(result.data)) if result.success else result), ""


def remote_key(ctx: ToolContext, call: ToolCall, spec: ToolSpec, confirmation_id: Any) -> str:
    """The idempotency key of a remote call whose tool declares none: bound to the confirmation it
    consumes (one decision, one attempt), else to this run's tool call id."""
    bound = f"confirmation:{confirmation_id}" if confirmation_id is not None else f"call:{ctx.run_id}:{call.id}"
    return hashlib.sha256(f"{ctx.tenant_id}:{spec.name}:{bound}".encode()).hexdigest()


def propagates(error: BaseException) -> bool:
    """Which exceptions reach the caller instead of becoming a failure result: all of them under
    TOOLS_THROW_ON_ERROR; else permission and system errors, a lost run, and the configured ones."""
    if settings.TOOLS_THROW_ON_ERROR:
        return True
    if isinstance(error, (PermissionDeniedError, DatabaseError, OSError, FenceLost)):
        return True
    return any(isinstance(error, import_string(path)) for path in settings.TOOLS_PROPAGATE_EXCEPTIONS)


def finish(spec: ToolSpec, call: ToolCall, outcome: Outcome, audit: CallAudit) -> CallOutcome:
    """Audit what an execution (or the stored record of an earlier one) did and answer with it."""
    decision = {"EXECUTED": "EXECUTED" if outcome.result.success else "FAILED",
                "IDEMPOTENT_HIT": "IDEMPOTENT_HIT"}.get(outcome.kind, "REFUSED")
    audit.business_result_id = outcome.business_result_id
    audit.note_edits()
    audit.write(decision, outcome.result)
    return CallOutcome(call, outcome.result, return_direct=spec.return_direct)


def execute(checked: CheckedCall, audit: CallAudit, flow: Flow) -> CallOutcome:
    """Run the checked call's tool once, under its flow. Returns its outcome; raises the errors
    `propagates` names (after auditing them)."""
    ctx, call, spec, params = checked.ctx, checked.call, checked.spec, checked.params
    confirmation_id = flow.confirmation_id
    target = RemoteTarget(spec) if spec.remote is not None else LocalTarget(spec)
    refusal = target.refusal()
    if refusal is not None:
        # Nothing is sent and nothing runs; the run moves on past this call, so its confirmation
        # could never be used again: it ends REFUSED with the code (never left CONFIRMED on a
        # finished run; docs/decisions.md).
        return CallOutcome(call, flow.refuse(refusal, decision="REFUSED"))
    key = target.key(checked.key, ctx, call, confirmation_id)
    audit.idempotency_key = key or ""

    attempted = False  # the tool's body was entered (in any attempt): a decision spent on it

    def action() -> tuple[ToolResult, str]:
        nonlocal attempted
        attempted = True
        return target.run(ctx, params, key)

    def consume_and_execute() -> CallOutcome:
        with transaction.atomic():
            audit.execution = lease = None  # an attempt retried after a deadlock fences again
            if ctx.fence is not None and flow.fences(spec):
                lease = ctx.fence()  # a holder that lost the run executes nothing (raises FenceLost)
            # The rows this attempt writes name the process and the run lease it ran under.
            audit.execution = {"holder": correlation.holder(), "lease": lease or None}
            flow.consume(checked)
            if key:
                outcome = idempotency_execute(tenant_id=ctx.tenant_id, key=key, tool_name=spec.name,
                                              arguments_hash=audit.hash, action=action, read_only=spec.read_only)
            else:
                result, business_id, _ = run_action(action, read_only=spec.read_only)
                outcome = Outcome("EXECUTED", result, business_id)
            flow.record_outcome(outcome)
            if settings.TOOLS_THROW_ON_ERROR and outcome.kind == "EXECUTED" and not outcome.result.success:
                # TOOLS_THROW_ON_ERROR propagates business failures too. Raising here rolls back
                # the stored failure and the consumption with the failed attempt.
                raise ToolBusinessError(outcome.result.message, code=outcome.result.code)
            # Audited inside the transaction: if the audit write fails, nothing ran (fail closed).
            return finish(spec, call, outcome, audit)

    audit.confirmation_id = confirmation_id
    try:
        # A serialization failure or deadlock rolled the whole attempt back (consume, claim,
        # business change, audit row), so running it again executes the side effect once.
        # consume_and_execute opens its own atomic block: inside the run's step it is a
        # savepoint, and a retry runs inside the same step (core.sql).
        return retry_on_serialization_failure(consume_and_execute, own_savepoint=True)  # at most 3 attempts
    except ConfirmationRegated as regated:
        return flow.regated(call, regated)
    except ConsumeRefused as refused:
        return CallOutcome(call, flow.refuse(ToolResult.failure(refused.code, refused.message), decision="REFUSED"))
    except ConfirmationExpired as error:
        return CallOutcome(call, audit.stop("EXPIRED", ToolResult.failure("CONFIRMATION_EXPIRED", error.message)))
    except ConfirmationNotConsumable as error:
        # Already consumed: by an earlier attempt whose worker died after committing (recovery),
        # or by a racing resume. A keyed call answers from the record that attempt stored.
        earlier = idempotency_peek(tenant_id=ctx.tenant_id, key=key, arguments_hash=audit.hash) if key else None
        if earlier is not None:
            return finish(spec, call, earlier, audit)
        # A binding that does not match (another user, tenant, conversation, tool or arguments)
        # does not burn the request: its own run may still consume it (tests/approvals/test_binding.py).
        return CallOutcome(call, audit.stop("DENIED", ToolResult.failure("CONFIRMATION_INVALID", error.message)))
    except Exception as error:
        if propagates(error):
            code = getattr(error, "code", None)  # ours are strings; urllib's HTTPError (an OSError) has an int
            code = code if isinstance(code, str) and code else "SYSTEM_ERROR"
            if not isinstance(error, FenceLost) and transaction_usable():
                # Not for a lost run or an aborted transaction: the step rolls back and the
                # run's next holder consumes the confirmation itself. A database error the
                # consumption's savepoint contained leaves the step to commit: spend it.
                flow.spend_on_failure(attempted, code, type(error).__name__)
            audit.write("FAILED", ToolResult.failure(code, type(error).__name__))
            raise
        logger.exception("tool %s failed", spec.name)
        flow.spend_on_failure(attempted, "TOOL_EXECUTION_FAILED", type(error).__name__)
        return CallOutcome(call, audit.stop("FAILED", ToolResult.failure(
            "TOOL_EXECUTION_FAILED", f"the tool failed ({type(error).__name__}); try again later",
            retryable=True, terminal=False)))
