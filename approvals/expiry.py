"""Expiry: PENDING requests nobody decided before `expires_at` become EXPIRED.

A CONFIRMED request is a decision already made and never expires; it runs when its turn settles.
Both services open their own transaction (they nest inside a caller's when there is one, as
`guard.guarded` and the run's answering of a decided call use them); the beat task
(approvals.tasks) and settle-on-read call them at the top level.
"""
from __future__ import annotations

import uuid

from django.db import transaction

from core import clock
from approvals import signals
from approvals.models import ConfirmationRequest
from audit import events

Status = ConfirmationRequest.Status


@transaction.atomic
def confirmations_expire(*, request_ids: list[uuid.UUID] | None = None, limit: int = 500,
                         tenant_id: int | None = None) -> list[uuid.UUID]:
    """Mark PENDING requests past `expires_at` EXPIRED, audit each, and settle them (a CONFIRMED
    request is a decision already made and never expires; it runs when its turn settles).

    `request_ids` restricts the sweep (used right after a late decision); `tenant_id` restricts
    it to one tenant (settle-on-read). `limit`: at most this many in this transaction (one
    sweep's batch; the rows stay locked until it commits, and each expiry adds its notifications'
    on-commit work). Returns the ids expired by this call; a request expired concurrently by
    another sweeper is not returned twice; a sweep (no `request_ids`) leaves a row locked by
    another transaction (being decided or expired) to it.
    """
    now = clock.now()
    due = ConfirmationRequest.objects.due(now=now)
    if request_ids is not None:
        due = due.filter(pk__in=request_ids)
    if tenant_id is not None:
        due = due.filter(tenant_id=tenant_id)
    expired: list[uuid.UUID] = []
    if request_ids is None:
        # A sweep racing another (beat, the web sweeper, a read's settle) takes the next due rows
        # instead of queueing behind the other's locked batch; the compare-and-set below still
        # decides. A targeted expiry (request_ids) waits instead: its caller reads the row next.
        due = due.select_for_update(skip_locked=True, of=("self",))
    for request in due.order_by("expires_at")[:limit]:
        changed = ConfirmationRequest.objects.filter(pk=request.pk, status=request.status).update(
            status=Status.EXPIRED, decided_at=now, outcome_code="CONFIRMATION_EXPIRED",
            decision_reason="nobody decided before the deadline")
        if changed != 1:
            continue
        request.status = Status.EXPIRED
        events.request_expired(request, actor_id=None)
        signals.send_settled(request)
        signals.send_ended(request, ending=signals.EXPIRED)
        expired.append(request.pk)
    return expired


def confirmations_expire_due(*, tenant_id: int | None = None) -> int:
    """Settle-on-read: expire what is due (of one tenant) before a page, list or run is read, so
    expiry holds within a read of the deadline even without a beat scheduler (docs/decisions.md).
    Cheap when nothing is due (one SELECT of one index entry, ConfirmationRequest.objects.any_due).
    Returns how many expired."""
    if not ConfirmationRequest.objects.any_due(now=clock.now(), tenant_id=tenant_id):
        return 0
    return len(confirmations_expire(tenant_id=tenant_id))
