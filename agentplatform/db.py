"""Database helpers shared by the apps.

`retry_on_serialization_failure` re-runs a whole transaction that PostgreSQL aborted because of a
serialization failure (SQLSTATE 40001) or a deadlock (40P01). Those two errors mean "this
transaction lost a race and was rolled back; running it again is safe and expected" (PostgreSQL
manual, 13.2.3 "Serializable Isolation Level" and 13.3.4 "Deadlocks"). Every other error,
including other OperationalErrors such as a lost connection, propagates at once.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable, TypeVar

from django.db import OperationalError, connection

logger = logging.getLogger(__name__)

T = TypeVar("T")

# SQLSTATE codes of psycopg.errors.SerializationFailure and psycopg.errors.DeadlockDetected.
RETRYABLE_SQLSTATES = {"40001": "serialization failure", "40P01": "deadlock detected"}


def retryable_sqlstate(error: BaseException) -> str | None:
    """Return the SQLSTATE when `error` is a Django OperationalError caused by a serialization
    failure or a deadlock (psycopg sets `sqlstate` on the `__cause__` Django wraps), else None."""
    if not isinstance(error, OperationalError):
        return None
    state = getattr(error.__cause__, "sqlstate", None)
    return state if state in RETRYABLE_SQLSTATES else None


def retry_on_serialization_failure(fn: Callable[[], T], *, attempts: int = 3, backoff_seconds: float = 0.05) -> T:
    """Call `fn()` (which opens and commits its own transaction) up to `attempts` times while it
    fails with a serialization failure or a deadlock; return its result.

    `fn` must be safe to re-run from the start: everything it wrote was rolled back with the
    aborted transaction. Between attempts it sleeps a random 0..backoff_seconds * 2**attempt
    seconds (full jitter), so two transactions that deadlocked do not collide again in lockstep.

    Inside an enclosing atomic block there is nothing to retry: PostgreSQL aborted the *outer*
    transaction, which only its owner can roll back, so `fn` runs once and the error propagates.
    Raises the last OperationalError after `attempts` failures, and any other exception at once.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    if connection.in_atomic_block:
        return fn()
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except OperationalError as error:
            state = retryable_sqlstate(error)
            if state is None or attempt == attempts:
                raise
            logger.warning("transaction aborted by %s (SQLSTATE %s); retrying, attempt %d of %d",
                           RETRYABLE_SQLSTATES[state], state, attempt + 1, attempts)
            time.sleep(random.uniform(0, backoff_seconds * 2 ** attempt))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
