"""Writes on confirmation requests: create, confirm/cancel by token, approve/reject, consume, expire.

Every top-level service is one durable transaction that also writes its audit row; a denial is
audited after its transaction rolled back (STYLE rule 3). Settling a request sends
`confirmation_settled` inside the transaction; the runtime defers its resume to `on_commit`.
"""
from __future__ import annotations

import datetime
import hashlib
import re
import secrets
import uuid
from typing import Any

from django.db import transaction

from agentplatform import clock
from agentplatform.db import update_row
from agentplatform.errors import DomainError
from approvals.errors import (
    ApprovalForbidden,
    ConfirmationAlreadyDecided,
    ConfirmationExpired,
    ConfirmationNotFound,
    ReasonRequired,
)
from approvals.models import Approval, ConfirmationRequest
from approvals.signals import confirmation_settled
from audit import events

Status = ConfirmationRequest.Status
OPEN_STATES = (Status.PENDING, Status.CONFIRMED)
TOKEN_BYTES = 32  # 256 random bits (issue 2, item 5)


TOKEN_PATTERN = re.compile(r"\bct_[A-Za-z0-9_\-]{16,}")


def redact_tokens(text: str) -> str:
    """Replace anything shaped like a confirmation token in free text with "[redacted token]".

    A user who pastes a token into a chat message must not send it to the model or the memory
    (seed 002 section 26: the token never goes into a prompt).
    """
    return TOKEN_PATTERN.sub("[redacted token]", text)


def token_digest(token: str) -> str:
    """Return the hex SHA-256 of a raw confirmation token; only this digest is ever stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _audit_request(request: ConfirmationRequest, *, decision: str, actor_id: int | None, status: str = "",
                   message: str = "") -> None:
    events.record(
        tenant_id=request.tenant_id,
        actor_id=actor_id,
        decision=decision,
        tool_name=request.tool_name,
        status=status or request.status,
        policy_decision=request.policy,
        conversation_id=request.conversation_id,
        run_id=request.run_id,
        tool_call_id=request.tool_call_id,
        arguments_hash=request.arguments_hash,
        masked_arguments=request.masked_arguments,
        confirmation_id=request.id,
        message=message,
    )


def _audit_refusal(*, actor, error: DomainError, request_id: uuid.UUID | None = None) -> None:
    """Audit a refused decision after its transaction rolled back. Unknown ids carry no tool."""
    request = None
    if request_id is not None and actor.tenant_id is not None:
        request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=actor.tenant_id).first()
    if request is not None:
        _audit_request(request, decision="REFUSED", actor_id=actor.pk, status=error.code, message=error.message)
    elif actor.tenant_id is not None:
        events.record(tenant_id=actor.tenant_id, actor_id=actor.pk, decision="REFUSED", status=error.code,
                      message=error.message)


def _settle(request: ConfirmationRequest) -> None:
    confirmation_settled.send(
        sender=ConfirmationRequest, request_id=request.id, run_id=request.run_id, status=request.status
    )


@transaction.atomic
def confirmation_create(
    *,
    tenant_id: int,
    user_id: int,
    conversation_id: uuid.UUID,
    run_id: uuid.UUID | None,
    tool_call_id: str,
    tool_id: int,
    tool_name: str,
    arguments: dict[str, Any],
    masked_arguments: dict[str, Any],
    arguments_hash: str,
    summary: str,
    risk: str,
    policy: str,
    quorum: int,
    ttl_seconds: int,
    context_excerpt: str = "",
) -> tuple[ConfirmationRequest, str | None]:
    """Create a PENDING request for one gated call.

    Returns (request, raw_token). The raw token (256 random bits, url-safe) exists only for
    requester-confirmed calls and is returned once; only its SHA-256 is stored. Approver-gated
    requests return None as the token.
    """
    raw_token = None
    digest = None
    if policy == ConfirmationRequest.Policy.REQUESTER:
        raw_token = "ct_" + secrets.token_urlsafe(TOKEN_BYTES)
        digest = token_digest(raw_token)
    request = ConfirmationRequest.objects.create(
        tenant_id=tenant_id,
        user_id=user_id,
        conversation_id=conversation_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        tool_id=tool_id,
        tool_name=tool_name,
        arguments=arguments,
        masked_arguments=masked_arguments,
        arguments_hash=arguments_hash,
        summary=summary[:500],
        risk=risk,
        policy=policy,
        quorum=quorum,
        token_hash=digest,
        context_excerpt=context_excerpt[:2000],
        expires_at=clock.now() + datetime.timedelta(seconds=ttl_seconds),
    )
    return request, raw_token


def _lock_by_token(token: str, user) -> ConfirmationRequest:
    if not isinstance(token, str) or not token or len(token) > 200 or user.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation token")
    request = (
        ConfirmationRequest.objects.select_for_update()
        .filter(token_hash=token_digest(token), tenant_id=user.tenant_id, user_id=user.pk)
        .first()
    )
    if request is None:
        raise ConfirmationNotFound("unknown confirmation token")
    return request


def _require_open(request: ConfirmationRequest, *, now: datetime.datetime) -> None:
    if request.status == Status.EXPIRED or (request.status in OPEN_STATES and request.expires_at <= now):
        raise ConfirmationExpired(f"confirmation {request.id} expired at {request.expires_at.isoformat()}")
    if request.status != Status.PENDING:
        raise ConfirmationAlreadyDecided(f"confirmation {request.id} is already {request.status}")


def _guarded(fn, *, actor, request_id: uuid.UUID | None = None, **kwargs):
    """Run a durable decision; on refusal audit it after the rollback, expire if due, re-raise."""
    try:
        return fn(actor=actor, request_id=request_id, **kwargs) if request_id else fn(actor=actor, **kwargs)
    except DomainError as error:
        if isinstance(error, ConfirmationExpired):
            rid = request_id or getattr(error, "request_id", None)
            if rid:
                confirmations_expire(request_ids=[rid])
        _audit_refusal(actor=actor, error=error, request_id=request_id or getattr(error, "request_id", None))
        raise


@transaction.atomic(durable=True)
def _confirm_by_token(*, actor, token: str, cancel: bool) -> ConfirmationRequest:
    request = _lock_by_token(token, actor)
    now = clock.now()
    try:
        _require_open(request, now=now)
    except DomainError as error:
        error.request_id = request.id  # type: ignore[attr-defined]
        raise
    if cancel:
        request.status = Status.CANCELLED
        request.decided_at = now
        decision = "CANCELLED"
    else:
        request.status = Status.CONFIRMED
        request.confirmed_at = request.decided_at = now
        decision = "CONFIRMED"
    # The row is locked (_lock_by_token): a plain UPDATE of the three fields, one round trip.
    update_row(ConfirmationRequest, request.pk, {"status": request.status, "confirmed_at": request.confirmed_at,
                                                 "decided_at": request.decided_at})
    _audit_request(request, decision=decision, actor_id=actor.pk)
    _settle(request)
    return request


def confirmation_confirm(*, token: str, user) -> ConfirmationRequest:
    """The requester confirms their own gated call with the raw token (seed 002 section 25).

    Returns the CONFIRMED request; the run resumes after commit. Raises ConfirmationNotFound
    (unknown token, other user or tenant: 404), ConfirmationExpired (410),
    ConfirmationAlreadyDecided (replayed or decided token: 409).
    """
    return _guarded(_confirm_by_token, actor=user, token=token, cancel=False)


def confirmation_cancel(*, token: str, user) -> ConfirmationRequest:
    """The requester declines their own gated call. Same errors as `confirmation_confirm`."""
    return _guarded(_confirm_by_token, actor=user, token=token, cancel=True)


@transaction.atomic(durable=True)
def _decide(*, actor, request_id: uuid.UUID, approve: bool, comment: str) -> ConfirmationRequest:
    if actor.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation request")
    request = (
        ConfirmationRequest.objects.select_for_update(of=("self",))
        .select_related("tool")
        .filter(pk=request_id, tenant_id=actor.tenant_id)
        .first()
    )
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    if request.policy != ConfirmationRequest.Policy.APPROVERS:
        raise ApprovalForbidden("this call is confirmed by its requester, not by approvers")
    if request.user_id == actor.pk:
        raise ApprovalForbidden("a requester never approves their own call")
    if not actor.has_perm("tools.approve_tool", request.tool):
        raise ApprovalForbidden("you do not hold approve_tool on this tool")
    now = clock.now()
    _require_open(request, now=now)
    if Approval.objects.filter(request=request, approver=actor).exists():
        raise ConfirmationAlreadyDecided("you already decided this request")
    Approval.objects.create(
        request=request, approver=actor, decision=Approval.Decision.APPROVE if approve else Approval.Decision.REJECT,
        comment=comment[:2000],
    )
    if not approve:
        request.status = Status.CANCELLED
        request.decided_at = now
    elif request.approvals.filter(decision=Approval.Decision.APPROVE).count() >= request.quorum:
        request.status = Status.CONFIRMED
        request.confirmed_at = request.decided_at = now
    request.save(update_fields=["status", "confirmed_at", "decided_at"])
    _audit_request(request, decision="APPROVED" if approve else "REJECTED", actor_id=actor.pk, message=comment[:200])
    if request.status != Status.PENDING:
        _settle(request)
    return request


def confirmation_approve(*, request_id: uuid.UUID, approver, comment: str = "") -> ConfirmationRequest:
    """Record one approver's APPROVE; at quorum the request becomes CONFIRMED and the run resumes.

    Rules: same tenant, `approve_tool` on the tool, not the requester, one decision per approver,
    CRITICAL quorum of distinct approvers (DESIGN section 8). Raises ConfirmationNotFound (404),
    ApprovalForbidden (403), ConfirmationExpired (410), ConfirmationAlreadyDecided (409).
    """
    return _guarded(_decide, actor=approver, request_id=request_id, approve=True, comment=comment)


def confirmation_reject(*, request_id: uuid.UUID, approver, reason: str) -> ConfirmationRequest:
    """Reject the request (CANCELLED) with a required reason; the model is told it was rejected.

    Raises ReasonRequired for a blank reason, otherwise as `confirmation_approve`.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReasonRequired("a rejection needs a reason")
    return _guarded(_decide, actor=approver, request_id=request_id, approve=False, comment=reason.strip())


def confirmation_consume(
    *,
    request_id: uuid.UUID,
    tenant_id: int,
    user_id: int,
    conversation_id: uuid.UUID,
    tool_name: str,
    arguments_hash: str,
) -> None:
    """Consume a CONFIRMED request with one compare-and-set (DESIGN step 7). Call inside the
    transaction that executes the call, so consumption and side effect commit together.

    Returns nothing (one UPDATE on the success path; the governed call reads nothing back). Raises ConfirmationExpired when past expiry, or
    ConfirmationNotFound (code CONFIRMATION_INVALID) for any binding mismatch, a replay,
    or a request that is not CONFIRMED.
    """
    now = clock.now()
    consumed = ConfirmationRequest.objects.filter(
        pk=request_id,
        status=Status.CONFIRMED,
        expires_at__gt=now,
        tenant_id=tenant_id,
        user_id=user_id,
        conversation_id=conversation_id,
        tool_name=tool_name,
        arguments_hash=arguments_hash,
    ).update(status=Status.CONSUMED, consumed_at=now)
    if consumed == 1:
        return
    request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=tenant_id).first()
    if request is not None and request.status in OPEN_STATES and request.expires_at <= now:
        raise ConfirmationExpired("the confirmation expired before it was used")
    if request is not None and request.status == Status.EXPIRED:
        raise ConfirmationExpired("the confirmation expired before it was used")
    raise ConfirmationNotFound("no consumable confirmation for exactly this call")


@transaction.atomic
def confirmations_expire(*, request_ids: list[uuid.UUID] | None = None, limit: int = 500) -> list[uuid.UUID]:
    """Mark PENDING/CONFIRMED requests past `expires_at` EXPIRED, audit each, and settle them.

    `request_ids` restricts the sweep (used right after a late decision). Returns the ids expired
    by this call; a request expired concurrently by another sweeper is not returned twice.
    """
    now = clock.now()
    due = ConfirmationRequest.objects.filter(status__in=OPEN_STATES, expires_at__lte=now)
    if request_ids is not None:
        due = due.filter(pk__in=request_ids)
    expired: list[uuid.UUID] = []
    for request in due.order_by("expires_at")[:limit]:
        changed = ConfirmationRequest.objects.filter(pk=request.pk, status=request.status).update(
            status=Status.EXPIRED, decided_at=now
        )
        if changed != 1:
            continue
        request.status = Status.EXPIRED
        _audit_request(request, decision="EXPIRED", actor_id=None)
        _settle(request)
        expired.append(request.pk)
    return expired


@transaction.atomic(durable=True)
def _issue_token(*, actor, request_id: uuid.UUID) -> str:
    request = (ConfirmationRequest.objects.select_for_update()
               .filter(pk=request_id, tenant_id=actor.tenant_id, user_id=actor.pk,
                       policy=ConfirmationRequest.Policy.REQUESTER).first())
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    _require_open(request, now=clock.now())
    raw_token = "ct_" + secrets.token_urlsafe(TOKEN_BYTES)
    request.token_hash = token_digest(raw_token)
    request.save(update_fields=["token_hash"])
    return raw_token


def confirmation_issue_token(*, request_id: uuid.UUID, user) -> str:
    """Issue a fresh token for the requester's own PENDING request, replacing (and voiding) the old.

    For calls gated while a background worker resumed the run: that token never reached the
    requester, who proves identity by session or API token instead. Returns the raw token (once).
    Raises ConfirmationNotFound (404), ConfirmationExpired (410), ConfirmationAlreadyDecided (409).
    """
    return _guarded(_issue_token, actor=user, request_id=request_id)
