"""Running notification work away from the caller: a Celery task with a broker, else a small pool
of threads of this process, so no person's request waits for a slow mail relay or webhook receiver.

Called after the deciding transaction committed (the receivers use `transaction.on_commit`); never
inside a transaction of its own.

The broker unreachable: a task that cannot be sent is not dropped; it runs on the same threads as
without a broker (each notice is still claimed once in the ledger, so a message that reached the
broker after all sends nothing twice). After such a failure the broker is not tried again for
BROKER_RETRY_SECONDS (core.broker): a mass expiry of 1,000 requests must not wait out
Kombu's publish retries 3,000 times in the sweeping thread.

Database connections: without a broker (or while it is unreachable) the work runs on at most
NOTIFY_THREADS threads per process (daemon threads started on first use, serving one queue). A
thread keeps its connection from one job to the next while the queue has work and closes it when
the queue is empty (with a pool, the connection goes back to it). So notifications hold at most
NOTIFY_THREADS connections per process, none while idle, and a burst of notifications waits in the
queue instead of opening a connection each (docs/operations.md, "Mass expiry").
"""
from __future__ import annotations

import atexit
import logging
import queue
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

from core import broker

logger = logging.getLogger(__name__)

# Without a broker, notification work runs on the notification threads (False: in the caller's
# thread, which tests use to stay deterministic).
EAGER_IN_THREAD = True
# A process that exits normally (a web server's graceful restart) waits this long for the jobs
# still queued; a killed one loses them (docs/operations.md, "Mass expiry").
DRAIN_SECONDS = 10.0
_jobs: queue.SimpleQueue = queue.SimpleQueue()
_workers: list[threading.Thread] = []
_idle = threading.Condition()
_pending = 0  # jobs queued or running, guarded by _idle
_drain_registered = threading.Event()


def _run(task, args: tuple) -> None:
    """One job: the task; then this thread's connections are closed (returned to the pool when
    there is one) when no job waits, or when one broke, so the next job starts on a sound one."""
    try:
        task.apply(args=list(args), throw=False)
    finally:
        if _jobs.empty():
            connections.close_all()
        else:
            for conn in connections.all(initialized_only=True):
                if conn.errors_occurred and not conn.is_usable():
                    conn.close()


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


def _submit(task, args: tuple) -> bool:
    """Queue a job and make sure NOTIFY_THREADS daemon threads serve the queue (daemon: a process
    that exits waits DRAIN_SECONDS at most, not for a relay's retries). Returns False, queuing
    nothing, when NOTIFY_QUEUE_MAX jobs are already queued or running: the caller runs it then."""
    global _pending
    with _idle:
        if _pending >= max(1, settings.NOTIFY_QUEUE_MAX):
            return False
        _pending += 1
        _workers[:] = [t for t in _workers if t.is_alive()]
        if not _workers and not _drain_registered.is_set():
            _drain_registered.set()
            atexit.register(_drain)
        while len(_workers) < max(1, settings.NOTIFY_THREADS):
            thread = threading.Thread(target=_work, name=f"agentplatform-notify-{len(_workers) + 1}", daemon=True)
            thread.start()
            _workers.append(thread)
    _jobs.put((task, args))
    return True


def dispatch(task, *args: Any) -> None:
    """Run Celery `task` with `args` away from the caller: enqueued with a broker; eagerly (no
    broker, or the broker unreachable) on the notification threads of this process (or inline
    when EAGER_IN_THREAD is False, or when NOTIFY_QUEUE_MAX jobs already wait: the caller then
    runs it, which slows the caller instead of growing the queue). Never raises: a failure is
    logged, and the decision that caused it stands."""
    try:
        if not settings.CELERY_TASK_ALWAYS_EAGER and broker.send(task, *args):
            return
        if not EAGER_IN_THREAD or not _submit(task, args):
            task.apply(args=list(args), throw=False)
    except Exception:  # noqa: BLE001 - a notification never undoes a decision
        logger.exception("notification task %s was not started", getattr(task, "name", task))


def _drain() -> None:
    """At exit: wait up to DRAIN_SECONDS for the queued jobs (the daemon threads still run then)."""
    with _idle:
        if _pending:
            logger.info("waiting up to %g s for %d queued notification jobs", DRAIN_SECONDS, _pending)
        _idle.wait_for(lambda: _pending == 0, DRAIN_SECONDS)


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
