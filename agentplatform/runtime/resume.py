"""The one place that enqueues or runs the resume of a run.

A run is resumed (`claims.run_resume`, or `claims.run_recover` for one whose holder died) by:
- `resume_run`, the Celery task, enqueued after a decision settles one of the run's requests
  commits (`resume_after_commit`, from the `confirmation_settled` receiver), by the recovery
  sweeps (`push`: the beat task and the web sweeper), and for a run started without waiting for
  it (`drive_later`: POST /chat/ with `Prefer: respond-async`);
- the request that confirmed the run's call itself (`resume_now`), which then answers with the
  run's new outcome; with eager tasks the on-commit resume stands aside for it (`resuming_inline`).

Without a broker (eager tasks: the embedded default) `drive_later` runs the task in a daemon thread
of the web process, so the request still answers at once; a process that dies with such a thread
leaves the run parked, and the recovery sweep pushes it after a lease.

Every resume claims the run with a compare-and-set, so duplicate deliveries, double clicks and
racing approvers execute each approved call once. Nothing here runs inside a caller's transaction:
what is enqueued from inside one is sent after it commits.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import uuid
from typing import Iterable, Iterator

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections, transaction

from core import broker, correlation
from agentplatform.runtime import claims
from agentplatform.runtime.leases import RunClaimLost
from agentplatform.runtime.outcome import Listener, RunOutcome, RunParked

logger = logging.getLogger(__name__)

# What a resume may cost: up to AGENT_MAX_ITERATIONS model calls (each bounded by
# LLM_TIMEOUT_SECONDS and the SDK's LLM_MAX_RETRIES) plus the tool calls of each turn.
RESUME_SOFT_TIME_LIMIT = settings.CELERY_RESUME_SOFT_TIME_LIMIT
RESUME_TIME_LIMIT = settings.CELERY_RESUME_TIME_LIMIT

# Set while a request resumes the run it just confirmed itself (`resume_now`): with eager tasks
# the on-commit resume would run the same run once more in the same request (it repeated the
# claim, an UPDATE and a re-read). With a broker the message is still sent: a worker and the
# request race for the run, and the compare-and-set claim lets one win.
_RESUMING_INLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("resuming_inline", default=False)

_threads: list[threading.Thread] = []  # the eager threads started by drive_later (tests join them)


def _backoff(retries: int) -> int:
    """Seconds before retry number `retries` + 1: exponential with full jitter, capped."""
    return get_exponential_backoff_interval(factor=settings.CELERY_RESUME_RETRY_BACKOFF, retries=retries,
                                            maximum=settings.CELERY_RESUME_RETRY_BACKOFF_MAX, full_jitter=True)


@shared_task(bind=True, name="runtime.resume_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=settings.CELERY_RESUME_MAX_RETRIES, soft_time_limit=RESUME_SOFT_TIME_LIMIT,
             time_limit=RESUME_TIME_LIMIT)
def resume_run(self, run_id: str) -> str:
    """Make progress on run `run_id` if it is this task's to take.

    Takes, with a compare-and-set, a run waiting for decisions that are all made, a run parked by
    a model outage, or a run whose holder died (lease expired); anything else is left alone.

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
        if claims.run_resume(run_id=run_id, park_on_model_error=park) is not None:
            return "resumed"
        if claims.run_recover(run_id=run_id, park_on_model_error=park) is not None:
            return "recovered"
        return "skipped"
    except RunParked as error:
        logger.warning("run %s parked: %s; retry %d of %d", run_id, error, self.request.retries + 1, self.max_retries)
        raise self.retry(exc=error, countdown=_backoff(self.request.retries))
    except RunClaimLost:
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


@contextlib.contextmanager
def resuming_inline() -> Iterator[None]:
    """Within this block the caller resumes the runs its decisions settle itself, with
    `resume_now` after the commit (eager tasks only: the on-commit resume stands aside)."""
    token = _RESUMING_INLINE.set(True)
    try:
        yield
    finally:
        _RESUMING_INLINE.reset(token)


def resume_now(*, run_id, listener: Listener | None = None) -> RunOutcome | None:
    """Resume `run_id` in this process now, if it can be resumed now (idempotent: None when it is
    not this caller's to take; see claims.run_resume). Raises what the resume raises."""
    return claims.run_resume(run_id=run_id, listener=listener)


def resume_after_commit(*, run_id) -> None:
    """Enqueue `resume_run(run_id)` after the current transaction (a decision) commits.

    A rolled-back decision enqueues nothing. The decision is committed before the task is sent, so
    a failure then (the broker is down; eagerly, an error of the resumed run itself) never turns
    the decision's answer into an error: it is logged, and the run stays waiting to resume until
    the recovery sweep (or the next read, eagerly) takes it.
    """
    if _RESUMING_INLINE.get() and settings.CELERY_TASK_ALWAYS_EAGER:
        return  # the caller resumes it right after the commit (resuming_inline)
    transaction.on_commit(lambda: _enqueue(run_id))


def _enqueue(run_id) -> None:
    # Eagerly the resume runs right here, inside another request (an approver's, or a settle-on-
    # read): that request keeps its own run id for its error bodies and logs.
    own = correlation.current_run_id()
    try:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            resume_run.delay(str(run_id))
        elif not broker.send(resume_run, str(run_id)):  # down: not waited for once per run
            logger.warning("resume of run %s was not enqueued now; the recovery sweep will resume it", run_id)
    except Exception:  # noqa: BLE001 - see resume_after_commit: the decision stands
        logger.exception("resume of run %s was not enqueued now; the recovery sweep will resume it", run_id)
    finally:
        correlation.set_run_id(own)


def push(run_ids: Iterable[uuid.UUID]) -> None:
    """Enqueue `resume_run` for each run a recovery sweep found stuck (each is claimed by
    compare-and-set, so pushing a run twice is harmless). With the broker unreachable the rest
    are left for the next sweep, which finds them stuck again (core.broker)."""
    for run_id in run_ids:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            resume_run.delay(str(run_id))
        elif not broker.send(resume_run, str(run_id)):
            logger.warning("broker unreachable: stuck runs are pushed again at the next sweep")
            return


def drive_later(*, run_id: uuid.UUID) -> None:
    """After the current transaction commits, have `run_id` driven in the background: a
    `resume_run` task on the broker, or (eager) a daemon thread running it in this process."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        resume_run.delay_on_commit(str(run_id))
        return

    def drive() -> None:
        try:
            resume_run.apply(args=[str(run_id)], throw=False)
        except Exception:  # noqa: BLE001 - the run itself records what failed
            logger.exception("background drive of run %s failed", run_id)
        finally:
            connections.close_all()

    def start() -> None:
        thread = threading.Thread(target=drive, name=f"agentplatform-run-{run_id}", daemon=True)
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
        thread.start()

    transaction.on_commit(start)


def join_background_runs(timeout: float = 30.0) -> None:
    """Wait for the eager threads `drive_later` started so far (tests)."""
    for thread in list(_threads):
        thread.join(timeout)
    close_old_connections()
