"""Running notification work away from the caller: a Celery task with a broker, else a small pool
of threads of this process, so no person's request waits for a slow mail relay or webhook receiver.

Called after the deciding transaction committed (the receivers use `transaction.on_commit`); never
inside a transaction of its own.

Database connections: without a broker the work runs on at most NOTIFY_THREADS threads per
process (daemon threads started on first use, serving one queue), and every job closes the connections of its
thread when it ends (with a pool, the connection goes back to it). So notifications hold at most
NOTIFY_THREADS connections per process, and none between jobs; a burst of notifications waits in
the pool's queue instead of opening a connection each.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

logger = logging.getLogger(__name__)

# Without a broker, notification work runs on the notification threads (False: in the caller's
# thread, which tests use to stay deterministic).
EAGER_IN_THREAD = True
_jobs: queue.SimpleQueue = queue.SimpleQueue()
_workers: list[threading.Thread] = []
_idle = threading.Condition()
_pending = 0  # jobs queued or running, guarded by _idle


def _run(task, args: tuple) -> None:
    """One job: the task, then this thread's connections closed (returned to the pool when there
    is one), whatever happened."""
    try:
        task.apply(args=list(args), throw=False)
    finally:
        connections.close_all()


def _work() -> None:
    global _pending
    while True:
        task, args = _jobs.get()
        try:
            _run(task, args)
        except Exception:  # noqa: BLE001 - one job's failure never stops the thread
            logger.exception("notification task %s failed", getattr(task, "name", task))
        finally:
            with _idle:
                _pending -= 1
                _idle.notify_all()


def _submit(task, args: tuple) -> None:
    """Queue a job and make sure NOTIFY_THREADS daemon threads serve the queue (daemon: a process
    that exits does not wait for a relay's retries)."""
    global _pending
    with _idle:
        _pending += 1
        _workers[:] = [t for t in _workers if t.is_alive()]
        while len(_workers) < max(1, settings.NOTIFY_THREADS):
            thread = threading.Thread(target=_work, name=f"agentplatform-notify-{len(_workers) + 1}", daemon=True)
            thread.start()
            _workers.append(thread)
    _jobs.put((task, args))


def dispatch(task, *args: Any) -> None:
    """Run Celery `task` with `args` away from the caller: enqueued with a broker; eagerly (no
    broker) on the notification threads of this process (or inline when EAGER_IN_THREAD is False).
    A failure to enqueue is logged, never raised: the decision that caused it stands."""
    try:
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            task.delay(*args)
            return
        if not EAGER_IN_THREAD:
            task.apply(args=list(args), throw=False)
            return
        _submit(task, args)
    except Exception:  # noqa: BLE001 - a notification never undoes a decision
        logger.exception("notification task %s was not started", getattr(task, "name", task))


def notification_threads() -> int:
    """How many notification threads run in this process (at most NOTIFY_THREADS)."""
    with _idle:
        return sum(t.is_alive() for t in _workers)


def join_notifications(timeout: float = 30.0) -> None:
    """Wait up to `timeout` seconds for the eager notification jobs queued so far (tests, the demo),
    including the jobs they queued themselves (a webhook delivery started by a notice)."""
    with _idle:
        _idle.wait_for(lambda: _pending == 0, timeout)
    close_old_connections()
