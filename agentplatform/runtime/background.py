"""Driving a run away from the request that started it (issue 12 item 3).

With a broker the run's `resume_run` task is enqueued on commit and a Celery worker drives it.
Without one (eager: the embedded default) a daemon thread of the web process does, so the
request still answers at once; a process that dies with such a thread leaves the run parked, and
the recovery sweep (web sweeper or beat) pushes it after a lease.
"""
from __future__ import annotations

import logging
import threading
import uuid

from django.conf import settings
from django.db import close_old_connections, connections, transaction

logger = logging.getLogger(__name__)

_threads: list[threading.Thread] = []  # the eager threads started (tests join them)


def run_drive_later(*, run_id: uuid.UUID) -> None:
    """After the current transaction commits, have `run_id` driven in the background: a
    `resume_run` task on the broker, or (eager) a daemon thread running it in this process."""
    from agentplatform.runtime.tasks import resume_run

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
    """Wait for the eager background threads started so far (tests)."""
    for thread in list(_threads):
        thread.join(timeout)
    close_old_connections()
