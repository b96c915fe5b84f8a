"""Effective risk and approval policy of a tool: registry defaults, then admin overrides, then floors.

Floors (DESIGN section 8): CRITICAL is always approver-gated with a quorum of at least 2 distinct
approvers, whatever an override says.
"""
from __future__ import annotations

from dataclasses import dataclass

from tools.models import ApprovalPolicy, RiskLevel, Tool
from tools.registry import DEFAULT_POLICY, ToolSpec

CRITICAL_MIN_QUORUM = 2


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


def effective_policy(spec: ToolSpec, row: Tool) -> EffectivePolicy:
    """Combine the registry spec and the Tool row's overrides into the policy that applies now."""
    risk = row.risk_override or spec.risk
    if row.policy_override:
        policy = row.policy_override
    elif row.risk_override:
        policy = DEFAULT_POLICY[risk]
    else:
        policy = spec.default_policy
    quorum = row.quorum or spec.quorum
    if risk == RiskLevel.CRITICAL and policy != ApprovalPolicy.DENY:
        policy = ApprovalPolicy.APPROVERS
        quorum = max(quorum, CRITICAL_MIN_QUORUM)
    if policy == ApprovalPolicy.REQUESTER:
        quorum = 1
    return EffectivePolicy(risk=risk, policy=policy, quorum=quorum, ttl_seconds=row.ttl_seconds or spec.ttl_seconds)
