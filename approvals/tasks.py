"""Celery tasks of the approvals app: thin wrappers around idempotent services (see docs/operations.md)."""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from approvals.expiry import confirmations_expire

BATCH = 500
MAX_BATCHES = 20  # at most 10 000 requests per run; the next beat tick takes the rest


@shared_task(name="approvals.expire_confirmations", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=settings.CELERY_SWEEP_SOFT_TIME_LIMIT, time_limit=settings.CELERY_SWEEP_TIME_LIMIT)
def expire_confirmations() -> int:
    """Mark PENDING/CONFIRMED requests past `expires_at` EXPIRED (beat: every 15 s; see
    CELERY_BEAT_SCHEDULE in settings).

    Each expiry is audited and settles its request; the runtime then resumes the run on commit,
    and the model is told CONFIRMATION_EXPIRED for that call (distinct from REJECTED).
    Idempotent: the state change is a compare-and-set, so overlapping runs expire each request
    once. Returns how many requests this run expired.
    """
    total = 0
    for _ in range(MAX_BATCHES):
        expired = confirmations_expire(limit=BATCH)
        total += len(expired)
        if len(expired) < BATCH:
            break
    return total
