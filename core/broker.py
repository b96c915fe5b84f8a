"""Sending a Celery task to the broker without waiting on a broker that is down.

Kombu retries a publish to an unreachable broker before it gives up (about 0.7 s with a refused
connection, up to `socket_connect_timeout` per try when packets are dropped). Paid once per task,
a mass expiry of 1,000 requests (a resume and two notifications each) would hold the sweeping
thread for many minutes. So after one failure the broker is considered down for
BROKER_RETRY_SECONDS and `send` answers False at once; the caller falls back (the
notifications run in this process, a resume is left to the recovery sweep).
"""
from __future__ import annotations

import logging
import threading
import time

from django.conf import settings

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_down_until = 0.0  # time.monotonic() before which the broker is not tried again


def send(task, *args) -> bool:
    """`task.delay(*args)`. Returns True when the message was handed to the broker; False, without
    raising, when the broker could not be reached now, or could not be reached less than
    BROKER_RETRY_SECONDS (seconds) ago and nothing was tried."""
    global _down_until
    if time.monotonic() < _down_until:
        return False
    try:
        task.delay(*args)
        return True
    except Exception as error:  # noqa: BLE001 - Kombu's OperationalError, a refused socket, a timeout
        seconds = max(0, settings.BROKER_RETRY_SECONDS)
        with _lock:
            _down_until = time.monotonic() + seconds
        logger.warning("broker unreachable (%s) sending %s; not tried again for %d s",
                       type(error).__name__, getattr(task, "name", task), seconds)
        return False


def is_down() -> bool:
    """Whether a send failed less than BROKER_RETRY_SECONDS ago."""
    return time.monotonic() < _down_until


def retry_now() -> None:
    """Forget an earlier failure: the next `send` tries the broker again (tests, a health check)."""
    global _down_until
    with _lock:
        _down_until = 0.0
