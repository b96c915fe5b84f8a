"""The requester's decisions on their own gated calls: confirm or decline with the token (or, signed
in, by the request's id from its page), get a fresh token, withdraw a pending request.

Each public function is a top-level service: one durable transaction with its audit row, never
called inside a caller's transaction; a refusal is audited after the rollback (`guard.guarded`).
"""
from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from core import clock, correlation, tokens
from core.sql.select import update_rows
from core.sql.statements import update_row
from core.errors import DomainError
from core.redaction.text import mask_text
from approvals import locks, signals, tracing
from approvals.errors import ApprovalForbidden, ConfirmationNotFound
from approvals.guard import guarded, require_open
from approvals.independence import is_service_account
from approvals.models import ConfirmationRequest
from audit import events

Status = ConfirmationRequest.Status
TOKEN_PREFIX = "ct_"  # what makes a confirmation token recognisable to masking (core.redaction.text)


def _token_where(token: str, user, conversation_id=None) -> dict[str, Any]:
    """The conditions that find the user's own request by its raw token (only its digest is
    stored), in their tenant and, when given, in that conversation. Raises ConfirmationNotFound
    for a token that cannot be one (not a string, empty, over 200 characters) or a user without
    a tenant."""
    if not isinstance(token, str) or not token or len(token) > 200 or user.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation token")
    where = {"token_hash": tokens.digest(token), "tenant_id": user.tenant_id, "user_id": user.pk}
    if conversation_id is not None:
        where["conversation_id"] = conversation_id
    return where


def _lock_by_token(where: dict[str, Any]) -> ConfirmationRequest:
    """Lock and read the request `_token_where` found. Raises ConfirmationNotFound."""
    request = locks.request_by_token(where)
    if request is None:
        raise ConfirmationNotFound("unknown confirmation token")
    return request


@transaction.atomic(durable=True)
def _decide(*, actor, where: dict[str, Any], cancel: bool) -> ConfirmationRequest:
    """Confirm (or decline, `cancel`) the requester's own request `where` finds (`_token_where` or
    `_own_where`), with its audit row, in one durable transaction."""
    now = clock.now()
    if cancel:
        changes = {"status": Status.CANCELLED, "decided_at": now, "decision_reason": "declined by the requester"}
        audit_event = events.request_cancelled
    else:
        changes = {"status": Status.CONFIRMED, "confirmed_at": now, "decided_at": now}
        audit_event = events.request_confirmed
    changes["decided_by"] = actor.pk
    # The decision is one compare-and-set on an open request, which also reads the row it changed
    # (no locking read before it: one statement on the hot path). When it matches nothing, the
    # locked read below says why: unknown token (404), expired (410) or already decided (409).
    changed = update_rows(ConfirmationRequest, {**where, **ConfirmationRequest.open_statement_conditions(now)}, changes)
    request = changed[0] if changed else _lock_by_token(where)
    correlation.set_run_id(request.run_id)  # a refusal's error body names the run too
    if not changed:
        try:
            require_open(request, now=now)
        except DomainError as error:
            error.request_id = request.id  # type: ignore[attr-defined]
            raise
        update_row(ConfirmationRequest, request.pk, changes)  # open after all (the clock moved): decide it
        for name, value in changes.items():
            setattr(request, "decided_by_id" if name == "decided_by" else name, value)
    audit_event(request, actor_id=actor.pk)
    signals.send_settled(request)
    return request


def _confirm_by_token(*, actor, token: str, cancel: bool, conversation_id=None) -> ConfirmationRequest:
    return _decide(actor=actor, where=_token_where(token, actor, conversation_id), cancel=cancel)


def _own_where(request_id: uuid.UUID, user) -> dict[str, Any]:
    """The conditions that find `user`'s own requester-confirmed request `request_id` in their
    tenant (their session proves who they are: no token). Raises ConfirmationNotFound for a user
    without a tenant."""
    if user.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation request")
    return {"id": request_id, "tenant_id": user.tenant_id, "user_id": user.pk,
            "policy": ConfirmationRequest.Policy.REQUESTER}


def _decide_own(*, actor, request_id: uuid.UUID, cancel: bool) -> ConfirmationRequest:
    if not cancel and is_service_account(actor):
        # A program never confirms for a person (as over MCP): a person asks and confirms.
        raise ApprovalForbidden("a service account never confirms a gated call; a person decides it "
                                "/ 服务账号不能确认需确认的调用，须由人决定")
    return _decide(actor=actor, where=_own_where(request_id, actor), cancel=cancel)


@tracing.decision("confirm")
def confirmation_confirm(*, token: str, user, conversation_id=None) -> ConfirmationRequest:
    """The requester confirms their own gated call with the raw token.

    conversation_id: when given, the token must belong to a request of that conversation.
    Returns the CONFIRMED request; the run resumes after commit. Raises ConfirmationNotFound
    (unknown token, other user, tenant or conversation: 404), ConfirmationExpired (410),
    ConfirmationAlreadyDecided (replayed or decided token: 409).
    """
    return guarded(_confirm_by_token, actor=user, token=token, cancel=False, conversation_id=conversation_id)


@tracing.decision("cancel")
def confirmation_cancel(*, token: str, user) -> ConfirmationRequest:
    """The requester declines their own gated call. Same errors as `confirmation_confirm`."""
    return guarded(_confirm_by_token, actor=user, token=token, cancel=True)


@tracing.decision("confirm")
def confirmation_confirm_own(*, request_id: uuid.UUID, user) -> ConfirmationRequest:
    """The requester confirms their own requester-confirmed request `request_id` from a page they
    are signed in to (their request's page, approvals.requester_views): the server finds the
    request by id and owner, so no token travels through the page. Audited and settled exactly as
    `confirmation_confirm` (CONFIRMED; the run, if any, resumes after commit).

    Raises ConfirmationNotFound (404: unknown, another user's or tenant's, or an approver-gated
    request), ConfirmationExpired (410), ConfirmationAlreadyDecided (409: decided already, e.g.
    a double submit), ApprovalForbidden (a service account: a program never confirms for a person).
    """
    return guarded(_decide_own, actor=user, request_id=request_id, cancel=False)


@tracing.decision("cancel")
def confirmation_cancel_own(*, request_id: uuid.UUID, user) -> ConfirmationRequest:
    """The requester declines their own requester-confirmed request `request_id` from its page
    (CANCELLED, "declined by the requester", audited). Same errors as `confirmation_confirm_own`,
    except that a service account may decline its own call."""
    return guarded(_decide_own, actor=user, request_id=request_id, cancel=True)


@transaction.atomic(durable=True)
def _issue_token(*, actor, request_id: uuid.UUID) -> str:
    request = locks.request_of_requester(tenant_id=actor.tenant_id, user_id=actor.pk, request_id=request_id,
                                         policy=ConfirmationRequest.Policy.REQUESTER)
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    require_open(request, now=clock.now())
    raw_token, request.token_hash = tokens.mint(prefix=TOKEN_PREFIX)
    request.save(update_fields=["token_hash"])
    return raw_token


def confirmation_issue_token(*, request_id: uuid.UUID, user) -> str:
    """Issue a fresh token for the requester's own PENDING request, replacing (and voiding) the old.

    For calls gated while a background worker resumed the run: that token never reached the
    requester, who proves identity by session or API token instead. Returns the raw token (once).
    Raises ConfirmationNotFound (404), ConfirmationExpired (410), ConfirmationAlreadyDecided (409).
    """
    return guarded(_issue_token, actor=user, request_id=request_id)


@transaction.atomic(durable=True)
def _withdraw(*, actor, request_id: uuid.UUID, reason: str) -> ConfirmationRequest:
    if actor.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation request")
    # Only the requester's own request: anyone else's (same tenant or not) is unknown (404).
    request = locks.request_of_requester(tenant_id=actor.tenant_id, user_id=actor.pk, request_id=request_id)
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    correlation.set_run_id(request.run_id)
    now = clock.now()
    require_open(request, now=now)
    reason = mask_text(reason)[:500] or "withdrawn by the requester"
    request.status, request.decided_at, request.decided_by_id = Status.WITHDRAWN, now, actor.pk
    request.decision_reason, request.outcome_code, request.token_hash = reason, "WITHDRAWN", None
    update_row(ConfirmationRequest, request.pk, {
        "status": request.status, "decided_at": now, "decided_by": actor.pk, "decision_reason": reason,
        "outcome_code": "WITHDRAWN", "token_hash": None})  # the token is void from now on
    events.request_withdrawn(request, actor_id=actor.pk, message=reason)
    signals.send_settled(request)
    signals.send_ended(request, ending=signals.WITHDRAWN, actor_id=actor.pk)
    return request


@tracing.decision("withdraw")
def confirmation_withdraw(*, request_id: uuid.UUID, requester, reason: str = "") -> ConfirmationRequest:
    """The requester withdraws their own PENDING request (either policy): WITHDRAWN, nothing runs,
    its token can no longer be used, audited; the run resumes and the model is told (WITHDRAWN).

    Raises ConfirmationNotFound (404: unknown, or not the caller's own), ConfirmationExpired (410),
    ConfirmationAlreadyDecided (409: no longer pending).
    """
    return guarded(_withdraw, actor=requester, request_id=request_id, reason=reason or "")
