"""Template context for every page: the navigation's count of requests the user may decide."""
from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from approvals import selectors


def _nav(request: HttpRequest, user) -> dict:
    if not selectors.may_approve(user=user):
        return {"may_approve": False, "count": 0}
    counted = getattr(request, "approvals_pending_count", None)  # the inbox counted it already
    return {"may_approve": True, "count": selectors.count_decidable_by(user=user) if counted is None else counted}


def approvals_nav(request: HttpRequest) -> dict:
    """{"approvals_nav": lazy {"may_approve": bool, "count": int}, "approvals_poll_seconds": int}.

    Lazy: nothing runs until a template reads it, which base.html does only for members of a
    tenant. Then one EXISTS (does the user hold approve_tool anywhere?) and, only for people who
    may approve, one COUNT (selectors.count_decidable_by), unless the view already counted it
    (`request.approvals_pending_count`, set by the inbox pages)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or getattr(user, "tenant_id", None) is None:
        return {"approvals_nav": {"may_approve": False, "count": 0}}
    return {"approvals_nav": SimpleLazyObject(lambda: _nav(request, user)),
            "approvals_poll_seconds": settings.APPROVALS_POLL_SECONDS}
