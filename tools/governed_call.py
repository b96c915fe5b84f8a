"""One governed tool call: the checks every call shares, in order (the tool is offered, the
arguments parse, match the schema and the tool's rules, are normalised, the user holds the tool's
permission, the gate in force allows it: the registry's policy and the tenant's policy bundle,
tools.gate), then the hand-off to the call's flow, chosen once:
`Proposal` for a call without a decision (propose it to a human, or run it when ungated),
`Consumption` for a call that carries a decided confirmation.

Runs inside the caller's transaction (the run's step); the flows open their own savepoints.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from django.conf import settings
from pydantic import ValidationError

from core.text import loads_json, says_nothing, unstorable_reason
from tools.call_audit import CallAudit, CallStopped
from tools import tracing
from tools.calls import CallOutcome, CheckedCall, ToolCall
from tools.consume import Consumption
from tools.context import ToolContext
from tools.errors import ToolValidationError
from policies.shadow import shadow_record
from tools.gate import gate_call
from tools.models import Tool
from tools.money import MoneyInvalid
from tools.policy import effective_policy
from tools.propose import Proposal
from tools.registry import ToolSpec
from tools.results import ToolResult

Offered = dict[str, tuple[ToolSpec, Tool]]
Turn = dict[tuple[str, str], CallOutcome]


class GovernedCall:
    """One call of one model turn.

    offered: the tools offered to the context's user (name -> (spec, row)). turn: the gated calls
    of this model turn so far by (tool, arguments hash); an identical gated call shares the first
    one's confirmation request and outcome (one human decision, one execution, both call ids
    answered). None: no sharing.
    """

    def __init__(self, ctx: ToolContext, call: ToolCall, offered: Offered, *, turn: Turn | None) -> None:
        self.ctx, self.call, self.offered, self.turn = ctx, call, offered, turn
        self.audit = CallAudit(ctx, call, time.perf_counter())
        confirmation_id = ctx.confirmations.get(call.id)
        self.flow: Proposal | Consumption = (
            Proposal(self.audit) if confirmation_id is None else Consumption(self.audit, confirmation_id))

    def run(self) -> CallOutcome:
        """Check the call, then hand it to its flow. Returns its outcome; raises ToolPermissionDenied
        (a call without a decision of a tool the user may not use) and the system errors
        tools.execution.propagates names, after auditing them."""
        audit, flow = self.audit, self.flow
        try:
            spec, row = self._tool()
            params = self._normalized(spec, self._validated(spec))
            normalized = params.model_dump(mode="json")
            audit.arguments(normalized)
            if spec.permission and not self.ctx.user.has_perm(spec.permission):
                flow.permission_missing(spec)
            gate, judged = gate_call(self.ctx, spec, params, normalized, effective_policy(spec, row))
            policy = gate.policy
            audit.policy, audit.policy_version, audit.policy_rules = policy.policy, gate.version, gate.rules
            tracing.call_judged(policy)
            if gate.shadow and isinstance(flow, Proposal):  # once, when proposed; never enforced
                shadow_record(tenant_id=self.ctx.tenant_id, version=gate.version or 0, verdicts=gate.shadow,
                              tool_name=spec.name, user_id=self.ctx.user_id, tool_call_id=self.call.id,
                              conversation_id=self.ctx.conversation_id)
            if gate.denied:
                raise CallStopped(flow.refuse(ToolResult.failure(
                    gate.code, gate.reason, data={"rules": list(gate.rules)} if gate.rules else None)))
            key = spec.idempotency_key(self.ctx, params) if spec.idempotency_key else None
            audit.idempotency_key = key or ""
            shared = self.turn is not None and flow.shares_turn(policy)
            if shared and (spec.name, audit.hash) in self.turn:
                return self._same_as(self.turn[(spec.name, audit.hash)])
            outcome = flow.run(CheckedCall(ctx=self.ctx, call=self.call, spec=spec, row=row, params=params,
                                           normalized=normalized, policy=policy, key=key, gate=gate,
                                           policy_arguments=judged))
            if shared:
                self.turn[(spec.name, audit.hash)] = outcome
            return outcome
        except CallStopped as stop:
            return CallOutcome(self.call, stop.result)

    def _tool(self) -> tuple[ToolSpec, Tool]:
        """The offered tool the call names; the flow answers a call of any other name."""
        if self.call.name in self.offered:
            self.audit.tool(self.offered[self.call.name][1])
            return self.offered[self.call.name]
        self.flow.tool_not_offered(self.ctx, self.call)
        raise AssertionError("tool_not_offered always raises")  # pragma: no cover

    def _validated(self, spec: ToolSpec) -> Any:
        """The call's arguments parsed and validated against the tool's schema and rules."""
        try:
            return validated_arguments(spec, self.call.arguments)
        except ArgumentsInvalid as exc:
            raise CallStopped(self.audit.invalid(exc.message, exc.data)) from None

    def _normalized(self, spec: ToolSpec, params: Any) -> Any:
        """The tool's canonical form of the validated parameters (normalized_arguments)."""
        try:
            return normalized_arguments(self.ctx, spec, params)
        except ArgumentsInvalid as exc:
            raise CallStopped(self.audit.invalid(exc.message, exc.data)) from None

    def _same_as(self, first: CallOutcome) -> CallOutcome:
        """Answer this call from the identical gated call answered first in the same turn."""
        audit, call = self.audit, self.call
        # The row names the request it was answered from: the shared pending one, or, once decided,
        # the one this call carried (a duplicate of a consumed call is linked to that decision too).
        audit.confirmation_id = first.pending.confirmation_id if first.pending else (
            self.flow.confirmation_id or audit.confirmation_id)
        if first.pending is not None:
            pending = replace(first.pending, tool_call_id=call.id, token=None)
            audit.write("CONFIRMATION_REQUIRED", first.result)
            return CallOutcome(call, first.result, pending=pending)
        audit.write("IDEMPOTENT_HIT", first.result)
        return CallOutcome(call, first.result, return_direct=first.return_direct)


def _field_errors(error: ValidationError) -> list[dict[str, str]]:
    # Input values are left out: they may be huge or sensitive.
    return [{"field": ".".join(str(p) for p in e["loc"]) or "(root)", "error": e["msg"]}
            for e in error.errors(include_url=False, include_input=False)][:20]


class ArgumentsInvalid(Exception):
    """A call's arguments refused before anything else is judged: the pipeline answers
    INVALID_ARGUMENTS with `message` and `data` (None, or {"errors": [{"field", "error"[, "code"]}]})."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message, self.data = message, data


def validated_arguments(spec: ToolSpec, raw: Any) -> Any:
    """`raw` (the model's arguments: a JSON object encoded as a string) parsed and validated against
    `spec`'s parameter model and its `validate` rules. Returns the parameter model instance.
    Arguments that say nothing (None, "", whitespace, `null`: core.text.says_nothing) are the
    empty object: valid for a tool without required parameters, a schema error naming the
    missing ones otherwise (docs/providers.md).
    Raises ArgumentsInvalid (not a string, over settings.TOOLS_MAX_ARGUMENT_BYTES bytes, not JSON,
    not an object, unstorable text, schema or rule violations). No side effect: the pipeline
    (GovernedCall) audits the refusal, the admin's "try a call" shows it."""
    if says_nothing(raw):
        raw = "{}"
    if not isinstance(raw, str):
        raise ArgumentsInvalid("arguments must be a JSON object encoded as a string")
    if len(raw.encode("utf-8")) > settings.TOOLS_MAX_ARGUMENT_BYTES:
        raise ArgumentsInvalid(f"arguments exceed {settings.TOOLS_MAX_ARGUMENT_BYTES} bytes")
    try:
        parsed = loads_json(raw)
    except ValueError as exc:
        raise ArgumentsInvalid(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(parsed, dict):
        raise ArgumentsInvalid(f"arguments must be a JSON object, not {type(parsed).__name__}")
    unstorable = unstorable_reason(parsed)
    if unstorable:  # PostgreSQL cannot store it (core.text): refused, never cleaned
        raise ArgumentsInvalid(f"arguments {unstorable}, which cannot be processed")
    try:
        params = spec.parameters.model_validate(parsed)
    except ValidationError as exc:
        raise ArgumentsInvalid("arguments do not match the tool's schema", {"errors": _field_errors(exc)}) from None
    if spec.validate is not None:
        try:
            spec.validate(params)
        except ToolValidationError as exc:
            raise ArgumentsInvalid(exc.message) from None
    return params


def normalized_arguments(ctx: ToolContext, spec: ToolSpec, params: Any) -> Any:
    """The tool's canonical form of validated `params` (money in its minor unit), before they are
    hashed, shown or executed; `params` itself when the tool has no `normalize`. Reads only (a
    refund reads its order's currency). Raises ArgumentsInvalid (a MoneyInvalid names its field
    and stable sub-code in data["errors"])."""
    if spec.normalize is None:
        return params
    try:
        return spec.normalize(ctx, params)
    except MoneyInvalid as exc:
        raise ArgumentsInvalid(exc.message, {"errors": [
            {"field": exc.field, "error": exc.message, "code": exc.reason}]}) from None
    except ToolValidationError as exc:
        raise ArgumentsInvalid(exc.message) from None
