"""Row locks on confirmation requests, taken only through these named helpers.

Every decision locks the one request it decides (the request row only, `of=("self",)` where
related rows are read with it); a sweep over many requests locks them in primary-key order, so two
sweeps or a sweep and a decision never wait on each other in opposite orders. Call inside the
caller's transaction: a lock lasts until that transaction ends.
"""
from __future__ import annotations

import uuid
from typing import Any

from core.sql.select import select_rows
from approvals.models import ConfirmationRequest


def request_for_approver(*, tenant_id: int, request_id: uuid.UUID,
                         related: tuple[str, ...] = ("tool",)) -> ConfirmationRequest | None:
    """Lock the request `request_id` of `tenant_id` for an approver's decision, reading `related`
    with it (the related rows unlocked). Returns None when no such request exists in that tenant."""
    return (ConfirmationRequest.objects.select_for_update(of=("self",)).select_related(*related)
            .filter(pk=request_id, tenant_id=tenant_id).first())


def request_of_requester(*, tenant_id: int, user_id: int, request_id: uuid.UUID,
                         policy: str | None = None) -> ConfirmationRequest | None:
    """Lock the request `request_id` if `user_id` made it in `tenant_id` (and, when given, it has
    `policy`). Returns None otherwise: anyone else's request is unknown to the caller."""
    where: dict[str, Any] = {"pk": request_id, "tenant_id": tenant_id, "user_id": user_id}
    if policy is not None:
        where["policy"] = policy
    return ConfirmationRequest.objects.select_for_update().filter(**where).first()


def request_by_token(where: dict[str, Any]) -> ConfirmationRequest | None:
    """Lock the request matching `where` (its token digest and owner; a prebuilt statement).
    Returns None when none matches."""
    found = select_rows(ConfirmationRequest, where, for_update=True, limit=1)
    return found[0] if found else None


def pending_or_confirmed(where: dict[str, Any]):
    """Lock the PENDING or CONFIRMED requests matching `where`, in primary-key order. Returns the
    queryset (evaluated by iterating it)."""
    return ConfirmationRequest.objects.select_for_update().pending_or_confirmed().filter(**where).order_by("pk")
