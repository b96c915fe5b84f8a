"""Celery tasks of the tools app: thin wrappers around idempotent services (see docs/operations.md)."""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from tools.idempotency import idempotency_prune


@shared_task(name="tools.prune_idempotency_records", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=settings.CELERY_SWEEP_SOFT_TIME_LIMIT, time_limit=settings.CELERY_SWEEP_TIME_LIMIT)
def prune_idempotency_records() -> int:
    """Delete SUCCEEDED/FAILED idempotency records older than TOOLS_IDEMPOTENCY_RETENTION_HOURS
    (never below 72 h; PROCESSING and OUTCOME_UNKNOWN ones are kept). Beat: hourly. Idempotent:
    a second run deletes nothing more. Returns how many rows went."""
    return idempotency_prune()
