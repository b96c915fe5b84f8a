"""Celery tasks of the runtime: thin wrappers around idempotent services.

Every task of the runtime is idempotent through the database, which is why each one is
`acks_late` with `reject_on_worker_lost`: a message is acknowledged only after its task finished,
so a worker that dies mid-task leaves it to be delivered again, and the second delivery finds the
work claimed (compare-and-set on the run) or done. Time limits, retries and the Redis visibility
timeout they must stay under are explained in docs/operations.md.

The resume task, `runtime.resume_run`, lives with everything else that starts a resume in
`runtime.resume`; importing this module (Celery's autodiscovery) registers it too.
"""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from agentplatform.runtime import resume
from agentplatform.runtime.recovery import stuck_work_recover


@shared_task(name="runtime.recover_stuck_runs", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=settings.CELERY_SWEEP_SOFT_TIME_LIMIT, time_limit=settings.CELERY_SWEEP_TIME_LIMIT)
def recover_stuck_runs() -> dict[str, int]:
    """The recovery sweep (beat: every minute; see CELERY_BEAT_SCHEDULE).

    Marks idempotency records stuck in PROCESSING past TOOLS_IDEMPOTENCY_LEASE_SECONDS as
    OUTCOME_UNKNOWN for an administrator (never run again automatically), and enqueues
    `resume_run` for every run that needs a push: RUNNING past its lease (holder died), parked
    for longer than a lease (its retry was lost), or waiting although every decision was made a
    while ago (its resume message was lost). Idempotent: the runs are claimed by compare-and-set.
    Returns {"idempotency_records": n, "runs": n}.
    """
    found = stuck_work_recover()
    resume.push(found.run_ids)
    return {"idempotency_records": len(found.idempotency_record_ids), "runs": len(found.run_ids)}
