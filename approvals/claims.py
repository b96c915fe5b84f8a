"""An approver's claim on a request: "I am looking at this one" for a few minutes
(settings.APPROVAL_CLAIM_SECONDS), shown to the other approvers. A claim never blocks a decision:
the decision services ignore it. It ends when its claimer releases it, when the request is decided
(the view layer calls `claim_release_on_decision`), or at `expires_at`; a claim on a request that
is no longer open, or past `expires_at`, reads as released.

Also here: the record that an approver opened a request's facts (RequestView), read by the
approval quality report.
"""
from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from core import clock
from core.errors import ConflictError
from approvals import selectors
from approvals.errors import ApprovalForbidden, ConfirmationNotFound
from approvals.models import ConfirmationRequest, RequestClaim, RequestView


class ClaimNotOpen(ConflictError):
    """The request can no longer be decided (decided, withdrawn, expired): nothing to claim."""

    code = "CONFIRMATION_NOT_OPEN"


@dataclass(frozen=True)
class ClaimState:
    """Who holds the claim on a request now: `user` (a user row, or None when nobody does),
    `expires_at` (UTC, None when nobody does), `mine` (the asker holds it)."""

    request_id: uuid.UUID
    user: object | None
    claimed_at: datetime.datetime | None
    expires_at: datetime.datetime | None
    mine: bool


def claim_seconds() -> int:
    """How long a claim lasts, in seconds (APPROVAL_CLAIM_SECONDS, at least 1)."""
    return max(1, int(getattr(settings, "APPROVAL_CLAIM_SECONDS", 300)))


def _decidable(*, user, request_id: uuid.UUID) -> ConfirmationRequest:
    """The request if `user` may decide it now. Raises ConfirmationNotFound (unknown, another
    tenant's, or one the user could not see), ClaimNotOpen (no longer open), ApprovalForbidden
    (visible, open, but not theirs to decide)."""
    if selectors.requests_decidable_by(user=user).filter(pk=request_id).exists():
        return ConfirmationRequest(pk=request_id, tenant_id=user.tenant_id)
    seen = selectors.requests_history_for(user=user).filter(pk=request_id).first()
    if seen is None:
        raise ConfirmationNotFound("unknown confirmation request")
    if not seen.is_open_at(clock.now()):
        raise ClaimNotOpen("this request can no longer be decided, so it cannot be claimed")
    raise ApprovalForbidden("you may not decide this request, so you cannot claim it")


def _upsert_sql() -> str:
    """One statement claims a request: insert a claim, or take over one that is the claimer's own
    or past its expiry; a live claim of someone else is left alone (PostgreSQL and SQLite both
    speak `ON CONFLICT ... DO UPDATE ... WHERE`). Two approvers at the same moment: the second
    waits for the first's row, finds it live and changes nothing, so both read one claimer."""
    table = connection.ops.quote_name(RequestClaim._meta.db_table)
    return (f"INSERT INTO {table} (request_id, tenant_id, user_id, claimed_at, expires_at) "
            f"VALUES (%s, %s, %s, %s, %s) ON CONFLICT (request_id) DO UPDATE SET "
            f"user_id = excluded.user_id, claimed_at = CASE WHEN {table}.user_id = excluded.user_id "
            f"THEN {table}.claimed_at ELSE excluded.claimed_at END, expires_at = excluded.expires_at "
            f"WHERE {table}.user_id = excluded.user_id OR {table}.expires_at <= %s")


def _state(*, request_id: uuid.UUID, user, now: datetime.datetime) -> ClaimState:
    claim = RequestClaim.objects.select_related("user").filter(request_id=request_id, expires_at__gt=now).first()
    if claim is None:
        return ClaimState(request_id=request_id, user=None, claimed_at=None, expires_at=None, mine=False)
    return ClaimState(request_id=request_id, user=claim.user, claimed_at=claim.claimed_at,
                      expires_at=claim.expires_at, mine=claim.user_id == user.pk)


@transaction.atomic(durable=True)
def claim_take(*, request_id: uuid.UUID, user) -> ClaimState:
    """Reserve `request_id` for `user` for claim_seconds(), or renew their own claim; when another
    approver holds a live claim, leave it and return theirs. Returns the claim in force.

    Raises ConfirmationNotFound (404), ClaimNotOpen (409), ApprovalForbidden (403): only someone
    who may decide the request now may claim it.
    """
    request = _decidable(user=user, request_id=request_id)
    now = clock.now()
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(), [request.pk.hex if connection.vendor == "sqlite" else request.pk,
                                       request.tenant_id, user.pk, now,
                                       now + datetime.timedelta(seconds=claim_seconds()), now])
    return _state(request_id=request_id, user=user, now=now)


@transaction.atomic(durable=True)
def claim_release(*, request_id: uuid.UUID, user) -> ClaimState:
    """Drop `user`'s own claim on `request_id` (someone else's stays). Returns the claim in force
    after it. Raises ConfirmationNotFound for a request the user could not see."""
    if not (selectors.requests_history_for(user=user).filter(pk=request_id).exists()
            or selectors.requests_decidable_by(user=user).filter(pk=request_id).exists()):
        raise ConfirmationNotFound("unknown confirmation request")
    RequestClaim.objects.filter(request_id=request_id, user_id=user.pk).delete()
    return _state(request_id=request_id, user=user, now=clock.now())


def claim_release_on_decision(*, request_id: uuid.UUID, user) -> None:
    """After `user` decided `request_id`: their own claim on it ends, and anyone's once the
    request is no longer open (one DELETE). Another approver still reviewing a request that waits
    for more approvals keeps their claim."""
    RequestClaim.objects.filter(request_id=request_id).filter(
        Q(user_id=user.pk) | ~Q(request__status=ConfirmationRequest.Status.PENDING)).delete()


def claim_of(*, request_id: uuid.UUID, user) -> ClaimState:
    """The live claim on `request_id` as `user` sees it (one query; no permission check: callers
    have already found the request through the selectors)."""
    return _state(request_id=request_id, user=user, now=clock.now())


def claims_on(*, request_ids: list[uuid.UUID], tenant_id: int) -> dict[uuid.UUID, RequestClaim]:
    """Live claims on open requests among `request_ids` of `tenant_id`: {request id: claim with
    `user` selected} (one query)."""
    now = clock.now()
    rows = RequestClaim.objects.select_related("user").filter(
        request_id__in=request_ids, tenant_id=tenant_id, expires_at__gt=now,
        request__status=ConfirmationRequest.Status.PENDING, request__expires_at__gt=now)
    return {row.request_id: row for row in rows}


def view_record(*, request: ConfirmationRequest, user) -> None:
    """Note that `user` opened the facts of `request` now (one INSERT)."""
    RequestView.objects.create(tenant_id=request.tenant_id, request_id=request.pk, user_id=user.pk,
                               viewed_at=clock.now())
