"""Celery tasks of the audit app: thin wrappers around its services (see docs/operations.md)."""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from audit.verify_checkpoint import chains_verify


@shared_task(name="audit.verify_chains", ignore_result=True,
             soft_time_limit=settings.AUDIT_VERIFY_SOFT_TIME_LIMIT, time_limit=settings.AUDIT_VERIFY_TIME_LIMIT)
def verify_chains() -> int:
    """Verify every tenant's audit chain from its checkpoint, at most AUDIT_VERIFY_MAX_ROWS_PER_RUN
    rows per tenant; set the chain metrics and log an ERROR per broken chain. Beat: every
    AUDIT_VERIFY_EVERY_SECONDS. Read-only but for the checkpoint, which never moves back, so two
    overlapping runs are harmless. Returns how many chains are broken."""
    return chains_verify()
