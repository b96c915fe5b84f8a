"""Reads of confirmation requests for the people who made them: My requests (dashboard and API)."""
from __future__ import annotations

from django.db.models import QuerySet

from core import clock
from approvals.models import ConfirmationRequest
from approvals.selectors import annotated
from audit.models import AuditEvent


def requests_of(*, user, state: str = "all") -> QuerySet[ConfirmationRequest]:
    """The confirmation requests `user` made (either policy), newest first, with `approvals_count`
    (APPROVE and EDIT decisions on the current revision), the decisions and their approvers
    prefetched, and `decided_by` selected.

    state: "open" (PENDING and not past `expires_at`: what can still be withdrawn), "history"
    (everything else), "all". Only the user's own requests in the user's tenant: nobody else's,
    whatever their role. A user without a tenant gets an empty queryset.
    """
    if user.tenant_id is None:
        return ConfirmationRequest.objects.none()
    qs = ConfirmationRequest.objects.filter(tenant_id=user.tenant_id, user_id=user.pk)
    if state == "open":
        qs = qs.open()
    elif state == "history":
        qs = qs.exclude(ConfirmationRequest.open_q(clock.now()))
    return annotated(qs, user).select_related("decided_by").order_by("-created_at", "-pk")


def regates_of(*, tenant_id: int, request_ids: list) -> dict:
    """{request id: {"at": datetime, "message": "English / 中文"}}: the latest time each request was
    sent back to approvers because its policy became stricter after a decision (the REGATED audit
    row, masked), for the requests of `request_ids` that were; one query on the tenant's trail."""
    rows = (AuditEvent.objects.filter(tenant_id=tenant_id, confirmation_id__in=list(request_ids), status="REGATED")
            .order_by("occurred_at").values_list("confirmation_id", "occurred_at", "message"))
    return {request_id: {"at": at, "message": message} for request_id, at, message in rows}  # the latest wins


def request_of(*, user, request_id) -> ConfirmationRequest | None:
    """The request `request_id` if `user` made it in their tenant (annotated and prefetched as
    `requests_of`), else None: anyone else's request, whatever their role, another tenant's and an
    unknown id read the same (the page answers 404)."""
    return requests_of(user=user).filter(pk=request_id).select_related("user", "tool").first()
