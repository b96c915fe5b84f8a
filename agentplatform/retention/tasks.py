"""Celery task of retention: a thin wrapper around the idempotent service (docs/operations.md)."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from agentplatform.retention.services import retention_run
from agentplatform.tenancy.models import Tenant
from audit.archive import ArchiveRefused

logger = logging.getLogger(__name__)


@shared_task(name="retention.apply_retention", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=settings.RETENTION_SOFT_TIME_LIMIT, time_limit=settings.RETENTION_TIME_LIMIT)
def apply_retention() -> dict[str, dict[str, int]]:
    """Apply every tenant's retention (services.retention_run), one tenant after the other. Beat:
    daily (RETENTION_INTERVAL_SECONDS). Idempotent and safe beside another run (a tenant whose lock
    is held is skipped). A tenant whose audit chain is broken is logged and skipped; the others
    go on. Returns {tenant slug: rows deleted per class}."""
    done: dict[str, dict[str, int]] = {}
    for tenant in Tenant.objects.order_by("pk").iterator():
        try:
            done[tenant.slug] = retention_run(tenant=tenant).deleted
        except (ArchiveRefused, OSError) as error:
            logger.error("retention not applied", extra={"tenant": tenant.slug, "error": str(error)})
    return done
