"""Running notification work away from the caller: a Celery task with a broker, else a daemon
thread of this process, so no person's request waits for a slow mail relay or webhook receiver.

Called after the deciding transaction committed (the receivers use `transaction.on_commit`); never
inside a transaction of its own.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

logger = logging.getLogger(__name__)

# Without a broker, notification work runs in a daemon thread (False: in the caller's thread,
# which tests use to stay deterministic).
EAGER_IN_THREAD = True
_threads: list[threading.Thread] = []


def dispatch(task, *args: Any) -> None:
    """Run Celery `task` with `args` away from the caller: enqueued with a broker; eagerly (no
    broker) in a daemon thread of this process (or inline when EAGER_IN_THREAD is False). A
    failure to enqueue is logged, never raised: the decision that caused it stands."""
    try:
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            task.delay(*args)
            return
        if not EAGER_IN_THREAD:
            task.apply(args=list(args), throw=False)
            return

        def run() -> None:
            try:
                task.apply(args=list(args), throw=False)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run, name=f"agentplatform-notify-{task.name}", daemon=True)
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
        thread.start()
    except Exception:  # noqa: BLE001 - a notification never undoes a decision
        logger.exception("notification task %s was not started", getattr(task, "name", task))


def join_notifications(timeout: float = 30.0) -> None:
    """Wait for the eager notification threads started so far (tests, the demo)."""
    for thread in list(_threads):
        thread.join(timeout)
    close_old_connections()
