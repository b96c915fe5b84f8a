"""Celery tasks of the API: thin wrappers around idempotent services."""
from __future__ import annotations

from celery import shared_task

from agentplatform.api.idempotency import http_idempotency_prune


@shared_task(name="api.prune_http_idempotency_keys", ignore_result=True)
def prune_http_idempotency_keys() -> int:
    """Delete expired HTTP Idempotency-Key records (beat: hourly). Returns how many went."""
    return http_idempotency_prune()
