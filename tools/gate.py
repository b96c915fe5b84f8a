"""The gate of one call: the registry's policy with the operator's and the tenant's overrides
(tools.policy), then the tenant's policy bundle (policies: Cedar rules), in that order. The one
function the pipeline (tools.governed_call, at proposal and again at consume time) and the
admin's "try a call" use, so what an administrator tries is what runs (docs/policy.md).

Limits over history are not judged here: they count and reserve inside the proposing
transaction (tools.propose, policies.limits).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from policies.engine import RuleVerdict, Shadowed, evaluate_rules
from policies.kill_switch import TOOL_STOPPED
from policies.selectors import gate_state
from tools.context import ToolContext
from tools.levels import ApprovalPolicy
from tools.policy import EffectivePolicy
from tools.policy_catalog import catalog_entry
from tools.registry import ToolSpec

# How strict each policy is: the strongest of the registry's and the bundle's wins.
_RANK = {ApprovalPolicy.NONE: 0, ApprovalPolicy.REQUESTER: 1, ApprovalPolicy.APPROVERS: 2, ApprovalPolicy.DENY: 3}


@dataclass(frozen=True)
class Gate:
    """The gate of one call. policy: the EffectivePolicy in force for it (the bundle's gate
    applied; DENY when denied). code / reason: why it is denied (POLICY_DENIED with the rule's
    @reason, POLICY_ERROR), "" otherwise. version: the tenant's bundle version (None: no bundle).
    rules: the ids of the rules (and limits, once counted) that set the gate or denied it; empty
    when the registry's policy decided. shadow: what shadow rules would have done. limits: the
    bundle's limits of this tool (policies.limits judges them when the call is proposed or consumed)."""

    policy: EffectivePolicy
    code: str = ""
    reason: str = ""
    version: int | None = None
    rules: tuple[str, ...] = ()
    shadow: tuple[Shadowed, ...] = ()
    limits: tuple[Any, ...] = ()

    @property
    def denied(self) -> bool:
        return self.policy.policy == ApprovalPolicy.DENY

    def raised(self, *, policy: str, quorum: int, rule_ids: tuple[str, ...], code: str = "",
               reason: str = "") -> "Gate":
        """This gate tightened to `policy` / `quorum` by `rule_ids` (a limit, a kill switch): the
        stronger of the two wins; the ids join `rules` when they set the new gate."""
        current = self.policy
        if policy == ApprovalPolicy.DENY:
            return replace(self, policy=replace(current, policy=policy), code=code, reason=reason,
                           rules=tuple(rule_ids))
        if _RANK[policy] < _RANK[current.policy] or (
                policy == current.policy and (policy != ApprovalPolicy.APPROVERS or quorum <= current.quorum)):
            return self
        return replace(self, policy=replace(current, policy=policy, quorum=quorum if policy == ApprovalPolicy.APPROVERS
                                            else 1), rules=tuple(rule_ids))


def _applied(base: EffectivePolicy, verdict: RuleVerdict, version: int) -> Gate:
    gate = Gate(policy=base, version=version, shadow=verdict.shadow)
    if verdict.denied:
        return gate.raised(policy=ApprovalPolicy.DENY, quorum=0, rule_ids=verdict.rules, code=verdict.code,
                           reason=verdict.reason)
    if verdict.gate == "approval":
        return gate.raised(policy=ApprovalPolicy.APPROVERS, quorum=verdict.quorum, rule_ids=verdict.rules)
    if verdict.gate == "confirm":
        return gate.raised(policy=ApprovalPolicy.REQUESTER, quorum=1, rule_ids=verdict.rules)
    return gate


def policy_arguments(ctx: ToolContext, spec: ToolSpec, params: Any, normalized: dict[str, Any]) -> dict[str, Any]:
    """The arguments as rules and limits read them: the normalised arguments with what the tool
    fills in itself (ToolSpec.policy_arguments; a full refund's amount)."""
    if spec.policy_arguments is None:
        return normalized
    return {**normalized, **spec.policy_arguments(ctx, params)}


def gate_call(ctx: ToolContext, spec: ToolSpec, params: Any, normalized: dict[str, Any],
              base: EffectivePolicy) -> tuple[Gate, dict[str, Any]]:
    """The gate of one call of `spec` by `ctx`'s user with validated `params` (`normalized`: the
    same as JSON), from `base` (tools.policy.effective_policy).

    Returns (Gate, the arguments as policy read them). A tool stopped by a kill switch in the
    tenant or everywhere is denied first with TOOL_STOPPED and the stop's reason. A DENY base is
    denied with POLICY_DENIED; a bundle's satisfied forbid denies with its @reason; its satisfied
    permits raise the gate (the strongest wins, never below `base`). One query reads both the stop
    and the bundle version in force (policies.selectors.gate_state; the compiled bundle is cached
    per version).
    """
    compiled, stop = gate_state(ctx.tenant_id, spec.name)
    if stop is not None:
        return Gate(policy=replace(base, policy=ApprovalPolicy.DENY), code=TOOL_STOPPED, reason=stop.message), normalized
    if base.policy == ApprovalPolicy.DENY:
        return Gate(policy=base, code="POLICY_DENIED", reason="the tool policy denies this call"), normalized
    if compiled is None:
        return Gate(policy=base), normalized
    limits = tuple(compiled.limits_for(spec.name))
    if not compiled.rules and not limits:
        return Gate(policy=base, version=compiled.version), normalized
    arguments = policy_arguments(ctx, spec, params, normalized)
    verdict = evaluate_rules(compiled, catalog_entry(spec), arguments, username=ctx.user.get_username(),
                             risk=base.risk)
    return replace(_applied(base, verdict, compiled.version), limits=limits), arguments
