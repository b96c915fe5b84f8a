"""Celery tasks of the runtime: thin wrappers around idempotent services.

Every task here is idempotent through the database, which is why each one is `acks_late` with
`reject_on_worker_lost`: a message is acknowledged only after its task finished, so a worker that
dies mid-task leaves it to be delivered again, and the second delivery finds the work claimed
(compare-and-set on the run) or done. Time limits, retries and the Redis visibility timeout they
must stay under are explained in docs/operations.md.
"""
from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import InterfaceError, OperationalError

from agentplatform.runtime import loop
from agentplatform.runtime.recovery import stuck_work_recover

logger = logging.getLogger(__name__)

# What a resume may cost: up to AGENT_MAX_ITERATIONS model calls (each bounded by
# LLM_TIMEOUT_SECONDS and the SDK's LLM_MAX_RETRIES) plus the tool calls of each turn.
RESUME_SOFT_TIME_LIMIT = settings.CELERY_RESUME_SOFT_TIME_LIMIT
RESUME_TIME_LIMIT = settings.CELERY_RESUME_TIME_LIMIT


def _backoff(retries: int) -> int:
    """Seconds before retry number `retries` + 1: exponential with full jitter, capped."""
    return get_exponential_backoff_interval(factor=settings.CELERY_RESUME_RETRY_BACKOFF, retries=retries,
                                            maximum=settings.CELERY_RESUME_RETRY_BACKOFF_MAX, full_jitter=True)


@shared_task(bind=True, name="runtime.resume_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=settings.CELERY_RESUME_MAX_RETRIES, soft_time_limit=RESUME_SOFT_TIME_LIMIT,
             time_limit=RESUME_TIME_LIMIT)
def resume_run(self, run_id: str) -> str:
    """Make progress on run `run_id` if it is this task's to take; enqueued on commit of every
    decision that settles one of its confirmation requests, and by the recovery sweep.

    Takes, with a compare-and-set, a run waiting for decisions that are all made, a run parked by
    a model outage, or a run whose holder died (lease expired); anything else is left alone, so
    duplicate deliveries, double clicks and racing approvers execute each approved call once.

    Model outages (ModelUnavailable after the SDK's own retries) park the run and retry this task
    with exponential backoff, at most CELERY_RESUME_MAX_RETRIES times; the last attempt fails the
    run with MODEL_UNAVAILABLE. A lost database connection is retried the same way. Eagerly (no
    broker, inside a web request) nothing is parked or retried: the run fails at once.

    Returns "resumed", "recovered", "skipped" (nothing to take) or "superseded" (recovery took
    the run over while this task held it).
    """
    eager = bool(self.request.is_eager)
    park = not eager and self.request.retries < self.max_retries
    try:
        if loop.run_resume(run_id=run_id, park_on_model_error=park) is not None:
            return "resumed"
        if loop.run_recover(run_id=run_id, park_on_model_error=park) is not None:
            return "recovered"
        return "skipped"
    except loop.RunParked as error:
        logger.warning("run %s parked: %s; retry %d of %d", run_id, error, self.request.retries + 1, self.max_retries)
        raise self.retry(exc=error, countdown=_backoff(self.request.retries))
    except loop.RunClaimLost:
        logger.warning("run %s was taken over by recovery; this attempt stops", run_id)
        return "superseded"
    except (OperationalError, InterfaceError) as error:
        if eager or self.request.retries >= self.max_retries:
            raise
        # Before the claim nothing happened and the retry takes the run; after it the loop ended
        # the run (SYSTEM_ERROR) or, if it could not even write that, left it RUNNING for
        # recovery once its lease expires. Either way a retry is safe.
        raise self.retry(exc=error, countdown=_backoff(self.request.retries))
    except SoftTimeLimitExceeded:
        # The loop ended the run (SYSTEM_ERROR) on its way out; a tool call cut short rolled back.
        logger.error("resume of run %s exceeded %ss and was stopped", run_id, RESUME_SOFT_TIME_LIMIT)
        return "timed out"


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
    for run_id in found.run_ids:
        resume_run.delay(str(run_id))
    return {"idempotency_records": len(found.idempotency_record_ids), "runs": len(found.run_ids)}
