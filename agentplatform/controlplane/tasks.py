"""Celery tasks of the control plane: thin wrappers around idempotent services."""
from __future__ import annotations

from celery import shared_task

from agentplatform.controlplane.services import control_changes_expire


@shared_task(name="controlplane.expire_control_changes", ignore_result=True)
def expire_control_changes() -> int:
    """Mark pending control changes past their deadline EXPIRED (beat: every 5 minutes). Idempotent
    (compare-and-set per change). Returns how many expired."""
    return control_changes_expire()
