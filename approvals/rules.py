"""The approval rules, in one place: which decisions count toward a quorum, when a quorum is
reached, which approvers still stand, and which policy a decision must satisfy at consume time.

Pure functions of the rows they are given, except `standing_approvals`, which reads the decisions
of one request and judges each approver's standing now. Used by the approver's decisions
(approvals.approver_actions), the consumption (approvals.consumption) and the reads that show a
quorum's progress (approvals.selectors, the dashboard).
"""
from __future__ import annotations

from collections.abc import Iterable

from approvals import independence
from approvals.independence import is_service_account
from approvals.models import Approval, ConfirmationRequest

Policy = ConfirmationRequest.Policy

# Decisions that count towards a quorum: an approval, or an edit (the editor approves what they wrote).
COUNTED = (Approval.Decision.APPROVE, Approval.Decision.EDIT)
# Strictness of the approval policies that gate a call (NONE < REQUESTER < APPROVERS).
POLICY_RANK = {"NONE": 0, Policy.REQUESTER: 1, Policy.APPROVERS: 2}
# Why a decided call waits for approvers again (approvals.errors.Regate.CAUSES).
APPROVERS_NOW, QUORUM_RAISED, APPROVALS_LAPSED = "APPROVERS_NOW", "QUORUM_RAISED", "APPROVALS_LAPSED"


def quorum_reached(approvals: list[Approval], *, quorum: int, revision: int) -> bool:
    """Whether `approvals` (decisions on one request) confirm its `revision`: at least `quorum`
    APPROVE/EDIT decisions on that revision, and, when it was edited, at least one of them by
    someone other than its editor: an approver never approves their own edit alone
    (docs/approvals.md). Approvers are distinct by the one-decision-per-revision constraint."""
    counted = [a for a in approvals if a.revision == revision and a.decision in COUNTED]
    editors = {a.approver_id for a in counted if a.decision == Approval.Decision.EDIT}
    if editors and not any(a.approver_id not in editors for a in counted):
        return False
    return len(counted) >= quorum


def decisions_confirm(approvals: Iterable[Approval], *, quorum: int, revision: int) -> bool:
    """Whether the decisions on a request (with `approver` selected) confirm it when the latest
    one is recorded: `quorum_reached` over the decisions of people; a service account's decision
    never counts, however it got there."""
    return quorum_reached([a for a in approvals if not is_service_account(a.approver)], quorum=quorum,
                          revision=revision)


def stands(approval: Approval, request: ConfirmationRequest) -> bool:
    """Whether the approver of `approval` (selected) still stands for `request` now: active, a
    person (never a service account), of the request's tenant, not its requester, holding
    `tools.approve_tool` on its tool, and independent of it (approvals.independence: standing
    neither from the requester nor begun after the request was created). A few queries."""
    approver = approval.approver
    return (approver.is_active and not is_service_account(approver)
            and approver.tenant_id == request.tenant_id
            and approval.approver_id != request.user_id and approver.has_perm("tools.approve_tool", request.tool)
            and independence.assess(user=approver, request=request).eligible)


def standing_approvals(request: ConfirmationRequest) -> list[Approval]:
    """The APPROVE and EDIT decisions on the current revision of `request` whose approvers still
    stand now (`stands`). Each counted approver's standing is evaluated again at consume time.
    `request` needs `created_at`. Approvers are distinct by the
    `one_decision_per_approver_and_revision` constraint."""
    approvals = Approval.objects.filter(request_id=request.pk, decision__in=COUNTED, revision=request.revision) \
        .select_related("approver")
    return [a for a in approvals if stands(a, request)]


def required_policy(stored: ConfirmationRequest, *, policy: str, quorum: int) -> tuple[str, int]:
    """The policy and quorum a decision must satisfy now: the stricter of what it was asked under
    (`stored.policy`, `stored.quorum`) and what is in force (`policy`, `quorum`); a looser policy
    never lowers what was already asked. Returns (policy, quorum)."""
    now_rank, stored_rank = POLICY_RANK.get(policy, 0), POLICY_RANK.get(stored.policy, 0)
    if now_rank > stored_rank:
        return policy, quorum
    if now_rank < stored_rank or policy != Policy.APPROVERS:
        return stored.policy, stored.quorum
    return Policy.APPROVERS, max(quorum, stored.quorum)


def regate_cause(stored: ConfirmationRequest, *, needed_quorum: int) -> str:
    """Why a decision that no longer satisfies the policy in force must wait again: APPROVERS_NOW
    (it was the requester's confirmation), QUORUM_RAISED (more approvals are needed than were
    asked) or APPROVALS_LAPSED (approvals stopped counting)."""
    if stored.policy != Policy.APPROVERS:
        return APPROVERS_NOW
    if needed_quorum > stored.quorum:
        return QUORUM_RAISED
    return APPROVALS_LAPSED
