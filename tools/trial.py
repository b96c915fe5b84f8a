"""Try a call without side effects: what the pipeline would decide now for a tool, its arguments
(JSON) and a requester, with the verdict, the gate, the quorum, the bundle version, every rule and
limit that decided it and what shadow rules would have done (docs/policy.md, "Try a call").

It runs the pipeline's own steps, in the pipeline's order, inside a transaction that is always
rolled back, and writes nothing (no request, no audit row, no shadow verdict, no limit usage): the
tool offered to the requester (tools.selectors.offered_tools, else
tools.selectors.tool_unavailable_reason), the arguments validated and normalised
(tools.governed_call.validated_arguments / normalized_arguments), the gate
(tools.policy.effective_policy, then tools.gate.gate_call), then the limits counted without
reserving (policies.limits.limits_judge with reserve=False, applied by tools.execution.limits_gate).
The admin page is tools.admin.policy_try.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q

from policies.engine import Shadowed
from policies.limits import limits_judge
from policies.selectors import bundle_in_force
from tools.context import ToolContext
from tools.errors import ToolBusinessError
from tools.execution import limits_gate
from tools.gate import Gate, gate_call
from tools.governed_call import ArgumentsInvalid, normalized_arguments, validated_arguments
from tools.levels import ApprovalPolicy
from tools.models import TenantToolPolicy, Tool
from tools.policy import EffectivePolicy, effective_policy
from tools.registry import ToolSpec, registry
from tools.selectors import offered_tools, tool_unavailable_reason


@dataclass(frozen=True)
class LimitsDryRun:
    """What the bundle's limits would do to the call, counted without reserving anything.

    evaluated: False when the limits could not be judged here (note says why: "limits: not
    evaluated ..."). gate: the gate after the limits (the rules' gate when none applies or none is
    exceeded). rules: the ids of the limits that set that gate. shadow: what shadow limits would
    have done. details: what the limits module reported, as a list of dicts (shown as is)."""

    evaluated: bool
    note: str = ""
    gate: Gate | None = None
    rules: tuple[str, ...] = ()
    shadow: tuple[Shadowed, ...] = ()
    details: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TriedCall:
    """The verdict of one tried call.

    tool / requester: what was tried. arguments: the normalised arguments (JSON); judged: the
    arguments as rules and limits read them (with what the tool fills in, e.g. a full refund's
    amount). base: the registry's policy with the operator's and the tenant's overrides, before
    the bundle. rules_gate: the gate after the bundle's Cedar rules. gate: the final gate (after
    the limits). limits: the limits' dry run. refused: (code, message) when the pipeline would
    refuse the call before any rule (the tool is not offered to the requester), else None.
    precheck: (code, message) when the tool's read-only business precheck, which the pipeline
    runs before it asks anyone, would refuse a gated call now (e.g. REFUND_EXCEEDS_AMOUNT), else
    None; it does not change the policy's verdict."""

    tool: str
    requester: Any
    arguments: dict[str, Any]
    judged: dict[str, Any]
    base: EffectivePolicy
    rules_gate: Gate
    gate: Gate
    limits: LimitsDryRun
    refused: tuple[str, str] | None = None
    precheck: tuple[str, str] | None = None

    @property
    def verdict(self) -> str:
        """DENIED, APPROVERS (N approvers), REQUESTER (the requester confirms) or ALLOWED."""
        if self.refused is not None or self.gate.denied:
            return "DENIED"
        if self.gate.policy.policy == ApprovalPolicy.APPROVERS:
            return "APPROVERS"
        if self.gate.policy.policy == ApprovalPolicy.REQUESTER:
            return "REQUESTER"
        return "ALLOWED"

    @property
    def code(self) -> str:
        """The stable code of a denial (POLICY_DENIED, POLICY_ERROR, LIMIT_EXCEEDED, TOOL_STOPPED,
        PERMISSION_DENIED, TOOL_DISABLED, ...), "" when the call is not denied."""
        if self.refused is not None:
            return self.refused[0]
        return self.gate.code if self.gate.denied else ""

    @property
    def reason(self) -> str:
        """Why it is denied, in the words the model and the requester read; "" otherwise."""
        if self.refused is not None:
            return self.refused[1]
        return self.gate.reason if self.gate.denied else ""

    @property
    def verdict_text(self) -> str:
        """The verdict in English / Chinese."""
        if self.verdict == "DENIED":
            return f"denied: {self.code} / 拒绝：{self.code}"
        if self.verdict == "APPROVERS":
            quorum = self.gate.policy.quorum
            return f"needs {quorum} approver{'s' if quorum != 1 else ''} / 需要 {quorum} 位审批人批准"
        if self.verdict == "REQUESTER":
            return "needs the requester's confirmation / 需要申请人确认"
        return "allowed: runs without asking / 允许：直接执行"

    @property
    def deciding(self) -> tuple[str, ...]:
        """Every rule and limit that set the final gate (or denied it)."""
        return self.gate.rules

    @property
    def shadow(self) -> tuple[Shadowed, ...]:
        """What shadow rules and shadow limits would have done (recorded in real calls, never here)."""
        return tuple(self.rules_gate.shadow) + tuple(self.limits.shadow)


class TryInvalid(Exception):
    """The tried call cannot be judged: `field` (tool, requester, arguments) and `message`;
    `errors` lists field errors of the arguments ({"field", "error"}) when the schema refused them."""

    def __init__(self, field_name: str, message: str, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.field, self.message, self.errors = field_name, message, errors or []


def _tool_row(tool_name: str, tenant_id: int) -> tuple[ToolSpec, Tool]:
    """The registered tool `tool_name` as the tenant sees it (a shared tool or the tenant's own
    remote tool), with its TenantToolPolicy attached as `row.tenant_policy` the way
    tools.selectors.offered_tools attaches it. Raises TryInvalid("tool")."""
    spec = registry.get(tool_name)
    row = (Tool.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id), name=tool_name).first()
           if spec is not None else None)
    if row is None:
        raise TryInvalid("tool", f"unknown tool {tool_name[:100]!r}: not in this tenant's catalog / "
                                 "未知工具：不在该租户的工具目录中")
    row.tenant_policy = TenantToolPolicy.objects.filter(tenant_id=tenant_id, tool=row, enabled=True).first()
    return spec, row


def try_call(*, requester: Any, tool_name: str, arguments: str) -> TriedCall:
    """What the pipeline would decide now for `requester` (a member of a tenant) calling
    `tool_name` with `arguments` (the JSON text a model would send). Writes nothing.

    Returns a TriedCall. Raises TryInvalid: an unknown tool (field "tool"), arguments the pipeline
    would refuse with INVALID_ARGUMENTS, with the pipeline's message and field errors (field
    "arguments"). A tool that is not offered to the requester is not an error: its verdict is the
    pipeline's refusal (PERMISSION_DENIED, TOOL_DISABLED, ...), and the rules are still judged to
    show what they would do once it is.
    """
    with transaction.atomic():  # reads only; rolled back all the same, so nothing can stay behind
        tried = _tried(requester, tool_name, arguments)
        transaction.set_rollback(True)
    return tried


def _tried(requester: Any, tool_name: str, arguments: str) -> TriedCall:
    tenant_id = requester.tenant_id
    ctx = ToolContext(tenant=requester.tenant, user=requester, conversation_id=uuid.uuid4(),
                      request_id="policy-try")
    offered = offered_tools(user=requester)
    refused = None
    if tool_name in offered:
        spec, row = offered[tool_name]
    else:
        spec, row = _tool_row(tool_name, tenant_id)
        refused = tool_unavailable_reason(name=tool_name, user=requester, tenant_id=tenant_id)
    try:
        params = normalized_arguments(ctx, spec, validated_arguments(spec, arguments))
    except ArgumentsInvalid as exc:
        raise TryInvalid("arguments", f"INVALID_ARGUMENTS: {exc.message}",
                         (exc.data or {}).get("errors")) from None
    normalized = params.model_dump(mode="json")
    if refused is None and spec.permission and not requester.has_perm(spec.permission):
        refused = ("PERMISSION_DENIED", f"the requester lacks the permission {spec.permission}")
    base = effective_policy(spec, row)
    rules_gate, judged = gate_call(ctx, spec, params, normalized, base)
    limits = (LimitsDryRun(evaluated=True, note="not reached: the rules deny the call", gate=rules_gate)
              if rules_gate.denied else limits_dry_run(ctx, spec, rules_gate, judged))
    gate = limits.gate or rules_gate
    precheck = None
    if gate.policy.gated and spec.precheck is not None:
        try:
            spec.precheck(ctx, params)
        except ToolBusinessError as error:
            precheck = (error.code, error.message)
    return TriedCall(tool=tool_name, requester=requester, arguments=normalized, judged=judged, base=base,
                     rules_gate=rules_gate, gate=gate, limits=limits, refused=refused, precheck=precheck)


def limits_dry_run(ctx: ToolContext, spec: ToolSpec, gate: Gate, arguments: dict[str, Any]) -> LimitsDryRun:
    """The bundle's limits judged for this call without reserving anything: the pipeline's
    `policies.limits.limits_judge` with reserve=False (tools.propose calls it with reserve=True),
    its verdict applied to `gate` by the pipeline's own `tools.execution.limits_gate`.

    arguments: the call's arguments as policy reads them (with the tool's fills). Returns a
    LimitsDryRun. Raises what limits_judge raises for a real error."""
    compiled = bundle_in_force(ctx.tenant_id)
    applying = compiled.limits_for(spec.name) if compiled is not None and gate.version is not None else []
    if not applying:
        return LimitsDryRun(evaluated=True, note="no limit of the bundle applies to this tool", gate=gate)
    verdict = limits_judge(tenant_id=ctx.tenant_id, user_id=ctx.user_id, tool_name=spec.name, limits=applying,
                           arguments=arguments, reserve=False)
    details = [judged.public() for judged in verdict.judged]
    final = limits_gate(gate, verdict)
    exceeded = tuple(verdict.rules or ())
    rules = tuple(r for r in final.rules if r in exceeded)
    note = "" if rules else ("exceeded, but the gate is already as strict / 已超出，但闸门已同样严格" if exceeded
                             else "no limit is exceeded")
    return LimitsDryRun(evaluated=True, gate=final, rules=rules, shadow=tuple(verdict.shadow), details=details,
                        note=note)
