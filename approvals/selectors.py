"""Reads of confirmation requests for the people who decide them (dashboard and API).

Scoping rules (DESIGN section 7, issue 3): same tenant, `approve_tool` held on the request's tool
(user or group grant, no global grant), approver-gated policy, never the reader's own request.
"""
from __future__ import annotations

from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from guardian.shortcuts import get_objects_for_user

from agentplatform import clock
from approvals.models import Approval, ConfirmationRequest

Status = ConfirmationRequest.Status


def _approvable_tools(user) -> QuerySet:
    """Tool rows `user` holds `approve_tool` on (approvals sits below tools: no import of tools)."""
    tool_model = ConfirmationRequest._meta.get_field("tool").related_model
    return get_objects_for_user(user, "tools.approve_tool", klass=tool_model, accept_global_perms=False)


def _annotated(qs: QuerySet[ConfirmationRequest], user) -> QuerySet[ConfirmationRequest]:
    """Add `approvals_count` (APPROVE decisions so far) and `decided_by_me`; prefetch the decisions."""
    return qs.select_related("user", "tool").prefetch_related("approvals__approver").annotate(
        approvals_count=Count("approvals", filter=Q(approvals__decision=Approval.Decision.APPROVE), distinct=True),
        decided_by_me=Exists(Approval.objects.filter(request=OuterRef("pk"), approver=user)),
    )


def requests_decidable_by(*, user) -> QuerySet[ConfirmationRequest]:
    """Approver-gated requests `user` may decide now, newest first.

    PENDING, not past `expires_at`, in the user's tenant, on a tool the user holds `approve_tool`
    on, not requested by the user, and not already decided by the user. Each row carries
    `approvals_count` (int) and `decided_by_me` (always False here). A user without a tenant gets
    an empty queryset. The service re-checks every rule when the decision is made.
    """
    if user.tenant_id is None or not user.is_active:
        return ConfirmationRequest.objects.none()
    qs = ConfirmationRequest.objects.filter(
        tenant_id=user.tenant_id,
        policy=ConfirmationRequest.Policy.APPROVERS,
        status=Status.PENDING,
        expires_at__gt=clock.now(),
        tool__in=_approvable_tools(user),
    ).exclude(user_id=user.pk)
    qs = _annotated(qs, user).filter(decided_by_me=False)
    return qs.order_by("-created_at")


def requests_history_for(*, user) -> QuerySet[ConfirmationRequest]:
    """Approver-gated requests of the user's tenant that `user` can no longer decide, newest first.

    Decided (CONFIRMED, CONSUMED, CANCELLED), expired (EXPIRED, or PENDING past `expires_at` that
    the expiry sweep has not marked yet), or still pending but already decided by this user; on
    tools the user holds `approve_tool` on (other people's requests) or that the user decided.
    Rows carry `approvals_count` and `decided_by_me`.
    """
    if user.tenant_id is None or not user.is_active:
        return ConfirmationRequest.objects.none()
    now = clock.now()
    qs = ConfirmationRequest.objects.filter(
        tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.APPROVERS,
    ).filter(
        (Q(tool__in=_approvable_tools(user)) & ~Q(user_id=user.pk))
        | Q(pk__in=Approval.objects.filter(approver=user).values("request_id"))
    )
    qs = _annotated(qs, user).filter(
        ~Q(status=Status.PENDING) | Q(expires_at__lte=now) | Q(decided_by_me=True)
    )
    return qs.order_by("-created_at")


def request_as_seen_by_decider(*, user, request_id) -> ConfirmationRequest | None:
    """One approver-gated request of the user's tenant with `approvals_count` and `decided_by_me`,
    as the lists above show it (used to answer a decision with the request's fresh state), or
    None when it is unknown or of another tenant."""
    if user.tenant_id is None:
        return None
    qs = ConfirmationRequest.objects.filter(
        pk=request_id, tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.APPROVERS)
    return _annotated(qs, user).first()
