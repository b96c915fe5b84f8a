"""Transactions: retrying a transaction PostgreSQL aborted (serialization failure, deadlock), whether
the current one is still usable, giving a pooled connection back while waiting, and watching what
a block wrote.

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
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from django.db import OperationalError, connection
from psycopg import pq

from core.sql.values import default_connection


logger = logging.getLogger(__name__)

T = TypeVar("T")


def transaction_usable() -> bool:
    """False when the current transaction can only be rolled back: Django marked it, or
    PostgreSQL aborted it (a failed statement outside a savepoint). A database error that a nested
    `atomic` contained (its savepoint rolled back) leaves it usable; so does autocommit."""
    db = default_connection()
    if db.needs_rollback:
        return False
    if db.vendor == "postgresql" and db.connection is not None:
        return db.connection.info.transaction_status != pq.TransactionStatus.INERROR
    return True


def release_connection_while_waiting() -> None:
    """Give the default connection back to Django's connection pool before this thread waits on
    something slow, such as a model call (seconds to minutes): a handful of slow calls must not
    hold every pooled connection while approval pages, health checks and other requests wait for
    one (DB_POOL_MAX_SIZE per process, DB_POOL_TIMEOUT 30 s). The next query takes one from the
    pool again (psycopg_pool: no new connection, prepared statements kept with it).

    Only with a pool (DATABASES OPTIONS["pool"]) and outside a transaction; a no-op otherwise (a
    persistent or per-request connection would have to be reopened, about 3.5 ms)."""
    db = default_connection()
    if db.vendor == "postgresql" and db.connection is not None and not db.in_atomic_block and db.pool is not None:
        db.close()  # with a pool: putconn, not a disconnect


# SQLSTATE codes of psycopg.errors.SerializationFailure and psycopg.errors.DeadlockDetected.
RETRYABLE_SQLSTATES = {"40001": "serialization failure", "40P01": "deadlock detected"}


def retryable_sqlstate(error: BaseException) -> str | None:
    """Return the SQLSTATE when `error` is a Django OperationalError caused by a serialization
    failure or a deadlock (psycopg sets `sqlstate` on the `__cause__` Django wraps), else None."""
    if not isinstance(error, OperationalError):
        return None
    state = getattr(error.__cause__, "sqlstate", None)
    return state if state in RETRYABLE_SQLSTATES else None


def retry_on_serialization_failure(fn: Callable[[], T], *, attempts: int = 3, backoff_seconds: float = 0.05,
                                   own_savepoint: bool = False) -> T:
    """Call `fn()` (which opens and commits its own transaction) up to `attempts` times while it
    fails with a serialization failure or a deadlock; return its result.

    `fn` must be safe to re-run from the start: everything it wrote was rolled back with the
    aborted transaction. Between attempts it sleeps a random 0..backoff_seconds * 2**attempt
    seconds (full jitter), so two transactions that deadlocked do not collide again in lockstep.

    Inside an enclosing atomic block, `fn` is retried only when it opens its own `atomic` block
    (`own_savepoint=True`): the failure then aborted only that savepoint, which Django rolled back,
    and the enclosing transaction (READ COMMITTED, Django's default: every statement takes a fresh
    snapshot) can run it again; locks `fn` took are released with its savepoint. Otherwise
    PostgreSQL aborted the *outer* transaction, which only its owner can roll back, so `fn` runs
    once and the error propagates.
    Raises the last OperationalError after `attempts` failures, and any other exception at once.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    if connection.in_atomic_block and not own_savepoint:
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


class WriteTracker:
    """Set by `track_writes`: `wrote` is True once the block sent a statement that may have changed
    rows and was not undone. SELECT (with or without FOR UPDATE) and savepoint bookkeeping change
    none; a ROLLBACK TO SAVEPOINT restores what was true when that savepoint was taken (Django's
    nested `atomic` rolls back its savepoint when an exception leaves it)."""

    def __init__(self) -> None:
        self.wrote = False
        self._at_savepoint: dict[str, bool] = {}

    def __call__(self, execute, sql, params, many, context):
        head = str(sql).lstrip()[:120].upper()
        if head.startswith("SAVEPOINT "):
            self._at_savepoint[head[10:].strip()] = self.wrote
        elif head.startswith("ROLLBACK TO SAVEPOINT "):
            self.wrote = self._at_savepoint.get(head[22:].strip(), True)  # unknown savepoint: assume a write
        elif not head.startswith(("SELECT", "RELEASE SAVEPOINT ")):
            self.wrote = True
        return execute(sql, params, many, context)


@contextmanager
def track_writes() -> Iterator[WriteTracker]:
    """Watch the statements the block sends on the default connection (Django's execute wrapper).

    Yields a WriteTracker whose `wrote` tells whether the block sent a statement that may have
    changed rows (INSERT, UPDATE, DELETE, a CTE, anything but SELECT and savepoints) that a rolled
    back savepoint did not undo. Conservative: False means the block changed nothing in this
    transaction. Costs one Python call per statement, no round trip.
    """
    tracker = WriteTracker()
    with connection.execute_wrapper(tracker):
        yield tracker
