"""Cancellation by the platform: every request still to run (PENDING or CONFIRMED) of a run that
ended, or of a requester who left the tenant, becomes CANCELLED.

Both services open a transaction of their own and nest inside the caller's (the run's cancellation,
the tenant move), so the requests end with what ended them. No settle signal: nothing resumes.
"""
from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from core import clock
from approvals import locks
from approvals.models import ConfirmationRequest
from audit import events

Status = ConfirmationRequest.Status


@transaction.atomic
def confirmations_cancel_for_run(*, run_id: uuid.UUID, actor_id: int | None, reason: str) -> list[uuid.UUID]:
    """Cancel every request still to run (PENDING or CONFIRMED) of a run that is being cancelled or has
    ended: CANCELLED with the reason, audited (status RUN_ENDED). No settle signal: the run is not
    resumed. Returns the ids cancelled."""
    # Locked, in one order: a decision committing meanwhile is waited for, then cancelled too,
    # so no request is left CONFIRMED on a cancelled run.
    return _cancel_not_yet_run(where={"run_id": run_id}, actor_id=actor_id, reason=reason, outcome="RUN_ENDED")


def _cancel_not_yet_run(*, where: dict[str, Any], actor_id: int | None, reason: str, outcome: str) -> list[uuid.UUID]:
    """Cancel every request still to run (PENDING or CONFIRMED) matching `where`, locked in primary-key
    order, each with one conditional UPDATE (a request decided meanwhile is left as it is) and its
    CANCELLED audit row with status `outcome`. Inside the caller's transaction. Returns the ids."""
    cancelled = []
    for request in locks.pending_or_confirmed(where):
        changed = ConfirmationRequest.objects.filter(pk=request.pk).pending_or_confirmed().update(
            status=Status.CANCELLED, decided_at=clock.now(), decided_by=actor_id, decision_reason=reason[:500],
            outcome_code=outcome)
        if changed != 1:
            continue
        request.status = Status.CANCELLED
        events.request_cancelled(request, actor_id=actor_id, status=outcome, message=reason)
        cancelled.append(request.pk)
    return cancelled


@transaction.atomic
def confirmations_cancel_for_requester(*, user_id: int, tenant_id: int, actor_id: int | None,
                                       reason: str) -> list[uuid.UUID]:
    """Cancel every request still to run (PENDING or CONFIRMED) that `user_id` made in `tenant_id`: the
    requester left that tenant, so nothing they asked for there may still run (docs/roles.md,
    "Moving a user to another tenant"). CANCELLED with outcome REQUESTER_MOVED, audited, inside
    the caller's transaction; no settle signal (the mover cancels the runs too). Returns the ids."""
    return _cancel_not_yet_run(where={"user_id": user_id, "tenant_id": tenant_id}, actor_id=actor_id, reason=reason,
                        outcome="REQUESTER_MOVED")
