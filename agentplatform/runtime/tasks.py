"""Celery tasks of the runtime: thin wrappers around idempotent services."""
from __future__ import annotations

from celery import shared_task

from agentplatform.runtime import loop


@shared_task(name="runtime.resume_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def resume_run(run_id: str) -> str:
    """Resume a suspended run after a decision. Idempotent through the database: the run is
    claimed with a compare-and-set, so duplicate deliveries cause no second execution.
    Returns "resumed" or "skipped"."""
    outcome = loop.run_resume(run_id=run_id)
    return "skipped" if outcome is None else "resumed"
