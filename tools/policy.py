"""Effective risk and approval policy of a tool: registry defaults, then the platform operator's
global overrides, then the tenant's tighten-only overrides, then floors.

This is the one function the pipeline (tools.governed_call, on the rows tools.selectors.offered_tools
loads) and the admin (tools.admin) both call, so what the admin shows is what runs.

Rules (docs/roles.md):
- Global overrides (Tool row, platform operators only) may loosen. A tool the registry declares
  CRITICAL, or whose effective risk is CRITICAL, stays approver-gated with at least
  CRITICAL_MIN_QUORUM distinct approvers unless the operator stored a written reason
  (`Tool.critical_floor_waiver`), which is audited like every control-plane change.
- Tenant overrides (TenantToolPolicy row) only tighten: risk only up, quorum only up, TTL only
  down, and `enabled=False` removes the tool. They are combined with max/min here, so a stored
  value that would loosen (written around the form, or made loose by a later global change) has
  no effect; `tenant_override_errors` refuses such values when they are written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tools.levels import ApprovalPolicy, RiskLevel
from tools.registry import DEFAULT_POLICY, ToolSpec

CRITICAL_MIN_QUORUM = 2
RISK_ORDER = [RiskLevel.LOW, RiskLevel.MEDIUM, RiskLevel.HIGH, RiskLevel.CRITICAL]
POLICY_ORDER = [ApprovalPolicy.NONE, ApprovalPolicy.REQUESTER, ApprovalPolicy.APPROVERS, ApprovalPolicy.DENY]
_FROM_ROW: Any = object()


class GlobalOverrides(Protocol):
    """What the rules read of a Tool row (tools.models.Tool): the platform operator's overrides."""

    risk_override: str
    policy_override: str
    quorum: int | None
    ttl_seconds: int | None
    critical_floor_waiver: str


class TenantOverrides(Protocol):
    """What the rules read of a TenantToolPolicy row: one tenant's tighten-only overrides."""

    risk_override: str
    quorum: int | None
    ttl_seconds: int | None


@dataclass(frozen=True)
class EffectivePolicy:
    """risk: RiskLevel value. policy: ApprovalPolicy value. quorum: approvals needed. ttl_seconds: lifetime."""

    risk: str
    policy: str
    quorum: int
    ttl_seconds: int

    @property
    def gated(self) -> bool:
        return self.policy in (ApprovalPolicy.REQUESTER, ApprovalPolicy.APPROVERS)


def _stricter(order: list, a: str, b: str) -> str:
    return a if order.index(a) >= order.index(b) else b


def global_policy(spec: ToolSpec, row: GlobalOverrides) -> EffectivePolicy:
    """The policy for every tenant before tenant overrides: registry spec + the Tool row's
    global overrides + the CRITICAL floor (unless waived with a written reason)."""
    risk = row.risk_override or spec.risk
    if row.policy_override:
        policy = row.policy_override
    elif row.risk_override:
        policy = DEFAULT_POLICY[risk]
    else:
        policy = spec.default_policy
    quorum = row.quorum or spec.quorum
    critical = RiskLevel.CRITICAL in (risk, spec.risk)
    if critical and policy != ApprovalPolicy.DENY and not (row.critical_floor_waiver or "").strip():
        risk = _stricter(RISK_ORDER, risk, spec.risk)
        policy = ApprovalPolicy.APPROVERS
        quorum = max(quorum, CRITICAL_MIN_QUORUM)
    if policy == ApprovalPolicy.REQUESTER:
        quorum = 1
    return EffectivePolicy(risk=risk, policy=policy, quorum=quorum, ttl_seconds=row.ttl_seconds or spec.ttl_seconds)


def effective_policy(spec: ToolSpec, row: GlobalOverrides, tenant_policy: Any = _FROM_ROW) -> EffectivePolicy:
    """The policy that applies now in one tenant.

    spec: the registry entry. row: the Tool row (global overrides). tenant_policy: the tenant's
    TenantToolPolicy (or None for the global view); when omitted, the one
    `tools.selectors.offered_tools` attached to the row as `row.tenant_policy` (None if absent).
    Returns an EffectivePolicy. Raises nothing.
    """
    if tenant_policy is _FROM_ROW:
        tenant_policy = getattr(row, "tenant_policy", None)
    base = global_policy(spec, row)
    if tenant_policy is None:
        return base
    risk, policy, quorum, ttl = base.risk, base.policy, base.quorum, base.ttl_seconds
    if tenant_policy.risk_override:
        raised = _stricter(RISK_ORDER, tenant_policy.risk_override, risk)
        if raised != risk:
            risk = raised
            policy = _stricter(POLICY_ORDER, policy, DEFAULT_POLICY[risk])
    if tenant_policy.quorum:
        quorum = max(quorum, tenant_policy.quorum)
    if tenant_policy.ttl_seconds:
        ttl = min(ttl, tenant_policy.ttl_seconds)
    # A tenant that raised the risk to CRITICAL gets the CRITICAL floor; a tool CRITICAL already in
    # the global policy kept it there, or lost it only by the operator's written waiver, which a
    # tenant's tighten-only row must not undo.
    if risk == RiskLevel.CRITICAL and base.risk != RiskLevel.CRITICAL and policy != ApprovalPolicy.DENY:
        policy = ApprovalPolicy.APPROVERS
        quorum = max(quorum, CRITICAL_MIN_QUORUM)
    if policy == ApprovalPolicy.REQUESTER:
        quorum = 1
    return EffectivePolicy(risk=risk, policy=policy, quorum=quorum, ttl_seconds=ttl)


def tenant_override_errors(spec: ToolSpec | None, row: GlobalOverrides, tenant_policy: TenantOverrides) -> dict[str, str]:
    """Field -> message for every tenant override that would loosen the global policy (empty when
    it only tightens). A tenant may raise the risk, raise the quorum, shorten the TTL, or disable
    the tool; never go below the registry's declared risk or the global policy."""
    if spec is None:
        return {}
    base = global_policy(spec, row)
    errors = {}
    floor_risk = _stricter(RISK_ORDER, base.risk, spec.risk)
    if tenant_policy.risk_override and RISK_ORDER.index(tenant_policy.risk_override) < RISK_ORDER.index(floor_risk):
        errors["risk_override"] = (f"a tenant may only raise the risk: it is {floor_risk} "
                                   f"(registry {spec.risk}), so {tenant_policy.risk_override} would loosen it")
    if tenant_policy.quorum and tenant_policy.quorum < base.quorum:
        errors["quorum"] = f"a tenant may only raise the quorum: it is {base.quorum}"
    if tenant_policy.ttl_seconds and tenant_policy.ttl_seconds > base.ttl_seconds:
        errors["ttl_seconds"] = f"a tenant may only shorten the confirmation TTL: it is {base.ttl_seconds} s"
    return errors


def global_override_errors(spec: ToolSpec | None, row: GlobalOverrides) -> dict[str, str]:
    """Field -> message when the global overrides would take a CRITICAL tool below two distinct
    approvers without a written reason (`critical_floor_waiver`)."""
    if spec is None or (row.critical_floor_waiver or "").strip():
        return {}
    risk = row.risk_override or spec.risk
    if RiskLevel.CRITICAL not in (risk, spec.risk):
        return {}
    policy = row.policy_override or (DEFAULT_POLICY[risk] if row.risk_override else spec.default_policy)
    message = ("a CRITICAL tool keeps at least two distinct approvers; write the reason in "
               "'critical floor waiver' to loosen it")
    errors = {}
    if row.risk_override and RISK_ORDER.index(row.risk_override) < RISK_ORDER.index(spec.risk):
        errors["risk_override"] = message
    if policy not in (ApprovalPolicy.APPROVERS, ApprovalPolicy.DENY):
        errors["policy_override"] = message
    if row.quorum is not None and row.quorum < CRITICAL_MIN_QUORUM:
        errors["quorum"] = message
    return errors
