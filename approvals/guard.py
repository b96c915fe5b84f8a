"""What every person's decision shares: the check that a request is still open, and the wrapper
that audits a refused decision after its transaction rolled back.

`require_open` runs inside the decision's transaction; `guarded` runs a durable decision and must
not be called inside a transaction (the refusal's audit row is written after the rollback).
"""
from __future__ import annotations

import datetime
import uuid

from core.errors import DomainError
from approvals import expiry, trail
from approvals.errors import ConfirmationAlreadyDecided, ConfirmationExpired
from approvals.models import ConfirmationRequest

Status = ConfirmationRequest.Status


def require_open(request: ConfirmationRequest, *, now: datetime.datetime) -> None:
    """Raise ConfirmationExpired (410) when `request` expired by `now`, ConfirmationAlreadyDecided
    (409) when it is no longer PENDING; return when a person may still decide it."""
    if request.is_expired_at(now):
        raise ConfirmationExpired(f"confirmation {request.id} expired at {request.expires_at.isoformat()}")
    if request.status != Status.PENDING:
        raise ConfirmationAlreadyDecided(f"confirmation {request.id} is already {request.status}")


def guarded(fn, *, actor, request_id: uuid.UUID | None = None, **kwargs):
    """Run the durable decision `fn(actor=..., [request_id=...], **kwargs)` and return its result;
    on a DomainError audit the refusal after the rollback, expire the request if it was due, and
    re-raise. The request id of a token decision travels on the error (`error.request_id`)."""
    try:
        return fn(actor=actor, request_id=request_id, **kwargs) if request_id else fn(actor=actor, **kwargs)
    except DomainError as error:
        if isinstance(error, ConfirmationExpired):
            rid = request_id or getattr(error, "request_id", None)
            if rid:
                expiry.confirmations_expire(request_ids=[rid])
        trail.audit_refusal(actor=actor, error=error, request_id=request_id or getattr(error, "request_id", None))
        raise
