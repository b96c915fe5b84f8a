"""Who is told what about a request (docs/notifications.md, "Who is told").

- asked to decide: `approvals.eligibility.deciders_of` (may decide it now, never decided it);
- asked again after an edit: `must_decide_revision` (may decide it now and has not decided its
  current revision: the approvers whose earlier approval stopped counting and those who had not
  decided yet; never the editor, whose edit is their decision on the new revision);
- told it no longer needs them: `to_retract` (asked before, and not among those whose own
  decision ended it or who decided its current revision).
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from guardian.shortcuts import get_users_with_perms

from approvals import independence
from approvals.models import Approval, ConfirmationRequest
from notifications import ledger


def must_decide_revision(request: ConfirmationRequest) -> list:
    """Active members of the request's tenant holding `approve_tool` on its tool through a user or
    group grant (no superuser shortcut), not its requester, independent of it, who have not decided
    its current revision, in primary-key order. A few queries per candidate (independence)."""
    users = get_users_with_perms(request.tool, only_with_perms_in=["approve_tool"], with_group_users=True,
                                 with_superusers=False)
    users = users.filter(tenant_id=request.tenant_id, is_active=True).exclude(pk=request.user_id).exclude(
        pk__in=Approval.objects.filter(request_id=request.pk, revision=request.revision).values("approver_id"))
    return [u for u in users.order_by("pk") if independence.assess(user=u, request=request).eligible]


def to_retract(request: ConfirmationRequest) -> list:
    """The users asked to decide `request` (notifications.ledger.asked) who did not end it and have
    not decided its current revision themselves, active and still in its tenant, in primary-key order."""
    asked = ledger.asked(request)
    if not asked:
        return []
    decided = set(Approval.objects.filter(request_id=request.pk, revision=request.revision)
                  .values_list("approver_id", flat=True))
    skip = decided | {request.decided_by_id, request.user_id}
    # still the request's tenant's people: someone moved out since is told nothing more about it
    return list(get_user_model().objects.filter(pk__in=asked - skip, is_active=True, tenant_id=request.tenant_id)
                .order_by("pk"))

