"""Who may decide a confirmation request, and whether its quorum can still be reached: the
decisions that count now, the people asked to decide (the notifications' recipients), the
quorum's shortfall and each candidate's eligibility with its reason (docs/approvals.md,
"Eligibility"). Independence itself (who may count on whose request) is approvals.independence;
the lists of requests are approvals.selectors.
"""
from __future__ import annotations

from django.db.models import QuerySet
from guardian.shortcuts import get_users_with_perms

from approvals import independence
from approvals.models import Approval, ConfirmationRequest
from approvals.rules import COUNTED

Status = ConfirmationRequest.Status


def approvals_counted(request: ConfirmationRequest) -> int:
    """How many decisions count towards `request`'s quorum now: APPROVE and EDIT on its current
    revision (an edit restarts the quorum), as the pages and the quorum check count them. From
    the decisions a list prefetched with the row when it did, else one COUNT."""
    current = _prefetched_decisions(request)
    if current is None:
        return Approval.objects.filter(request_id=request.pk, decision__in=COUNTED, revision=request.revision).count()
    return sum(1 for a in current if a.decision in COUNTED)


def _prefetched_decisions(request: ConfirmationRequest) -> list | None:
    """The decisions on `request`'s current revision from a list's prefetch (`annotated`), or None
    when the row came without them."""
    cached = getattr(request, "_prefetched_objects_cache", {}).get("approvals")
    return None if cached is None else [a for a in cached if a.revision == request.revision]


def deciders_of(request: ConfirmationRequest) -> QuerySet:
    """The users who may decide `request` now: active members of its tenant holding
    `approve_tool` on its tool through a user or group grant (no global grant, no superuser
    shortcut), not its requester, independent of it (approvals.independence), and not having
    decided it already. The notifications' recipients;
    the service still re-checks every rule when one of them decides."""
    users = get_users_with_perms(request.tool, only_with_perms_in=["approve_tool"], with_group_users=True,
                                 with_superusers=False)
    users = users.filter(tenant_id=request.tenant_id, is_active=True).exclude(pk=request.user_id).exclude(
        pk__in=Approval.objects.filter(request_id=request.pk).values("approver_id")).order_by("pk")
    eligible = [u.pk for u in users if independence.assess(user=u, request=request).eligible]
    return users.filter(pk__in=eligible)


def quorum_shortfall(request: ConfirmationRequest) -> int:
    """For a PENDING approver-gated request: how many approvals it still needs beyond what the
    people who may still decide its current revision can give (0 when its quorum is reachable,
    and for any other request). Those people: active members of its tenant holding `approve_tool`
    on its tool through a user or group grant, not its requester, not having decided this revision
    and independent of it (the rules of approvals.approver_actions.request_for_approver)."""
    if request.status != Status.PENDING or request.policy != ConfirmationRequest.Policy.APPROVERS:
        return 0
    needed = request.quorum - approvals_counted(request)
    if needed <= 0:
        return 0
    current = _prefetched_decisions(request)
    decided = ({a.approver_id for a in current} if current is not None else
               set(Approval.objects.filter(request_id=request.pk, revision=request.revision)
                   .values_list("approver_id", flat=True)))
    able = [u for u in _approve_holders(request) if u.pk != request.user_id and u.pk not in decided]
    able = [u for u in able if independence.assess(user=u, request=request).eligible]
    return max(0, needed - len(able))


def _approve_holders(request: ConfirmationRequest) -> list:
    """The active members of `request`'s tenant holding `approve_tool` on its tool (user or group
    grant, no superuser shortcut), by username; read once per tool inside
    independence.shared_standing()."""
    def read() -> list:
        return list(get_users_with_perms(request.tool, only_with_perms_in=["approve_tool"], with_group_users=True,
                                         with_superusers=False)
                    .filter(tenant_id=request.tenant_id, is_active=True).order_by("username"))
    return independence.shared(("approve_tool holders", request.tenant_id, request.tool_id), read)


def approver_eligibility(request: ConfirmationRequest) -> dict[str, list[dict[str, str]]]:
    """Who may count toward `request`'s quorum, and why the others do not (docs/approvals.md,
    "Eligibility"): {"eligible": [{"username"}], "ineligible": [{"username", "code", "reason"}]}.

    Candidates: the active members of the request's tenant holding `approve_tool` on its tool
    (user or group grant, no superuser shortcut), and its requester. Codes: REQUESTER,
    SERVICE_ACCOUNT, GRANTED_BY_REQUESTER, GRANTED_AFTER_REQUEST (approvals.independence). Only
    usernames of the request's own tenant are named. A few queries per candidate (once per page
    inside independence.shared_standing()).
    """
    candidates = {u.pk: u for u in _approve_holders(request)}
    candidates.setdefault(request.user_id, request.user)
    eligible, excluded = [], []
    for user in sorted(candidates.values(), key=lambda u: u.username):
        verdict = independence.assess(user=user, request=request)
        if verdict.eligible:
            eligible.append({"username": user.username})
        else:
            excluded.append({"username": user.username, "code": verdict.code, "reason": verdict.reason})
    return {"eligible": eligible, "ineligible": excluded}
