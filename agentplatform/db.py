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
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

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


# -- single-row statements on the hot path ------------------------------------------------------
#
# The governed call writes an idempotency claim, its result and an audit row. Through the ORM each
# of those costs about 0.45 ms of Python (query compile) on the reference VM, against about 0.15 ms
# for the same statement sent as text (bench/governance_overhead.py; README, Benchmarks). These two
# helpers build each statement's text once per model and shape, and convert values with the fields'
# own `get_db_prep_save`, so backend conversions (UUID, JSON, datetimes) stay Django's.

_SQL_CACHE: dict[tuple, str] = {}


def _column_values(model, values: dict, *, adding: bool) -> tuple[list[str], list]:
    """Columns and database values of `values` (field name -> Python value) for `model`.

    adding: fields not given take their default, or now for auto_now / auto_now_add; an auto
    primary key is left to the database. Raises FieldDoesNotExist for an unknown name.
    """
    from django.utils import timezone

    columns, params = [], []
    now = None
    fields = model._meta.concrete_fields if adding else [model._meta.get_field(name) for name in values]
    for field in fields:
        if field.name in values:
            value = values[field.name]
        elif field.attname in values:
            value = values[field.attname]
        elif not adding:
            continue
        elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            now = now or timezone.now()
            value = now
        elif field.primary_key and field.db_returning:
            continue  # AutoField / BigAutoField: the database assigns it
        else:
            value = field.get_default()
        columns.append(field.column)
        params.append(field.get_db_prep_save(value, connection))
    return columns, params


def insert_row(model, values: dict, *, conflict_fields: tuple[str, ...] = (), returning: str | None = None):
    """INSERT one row of `model` in one round trip; returns the `returning` column's value.

    values: field name (or attname, e.g. `tenant_id`) -> Python value; other fields take their
    defaults (auto_now / auto_now_add: now; an auto primary key: the database's). conflict_fields:
    the fields of a unique constraint; with them a conflicting row is skipped (`ON CONFLICT ...
    DO NOTHING`, PostgreSQL and SQLite >= 3.35) and None is returned, without the error and the
    savepoint an IntegrityError would cost. returning: a field name whose stored value is returned
    (None when skipped); without it True is returned for an inserted row. Model `save()` overrides
    and signals are not run. Raises IntegrityError for any other constraint violation.
    """
    columns, params = _column_values(model, values, adding=True)
    key = ("insert", model._meta.db_table, tuple(columns), conflict_fields, returning, connection.vendor)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "
               f"VALUES ({', '.join(['%s'] * len(columns))})")
        if conflict_fields:
            targets = ", ".join(quote(model._meta.get_field(name).column) for name in conflict_fields)
            sql += f" ON CONFLICT ({targets}) DO NOTHING"
        sql += f" RETURNING {quote(model._meta.get_field(returning or model._meta.pk.name).column)}"
        _SQL_CACHE[key] = sql
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    return row[0] if returning else True


def insert_rows(model, rows: list[dict], *, returning: str | None = None) -> list:
    """INSERT several rows of `model` in one round trip (one multi-row statement); returns the
    `returning` column's values in the rows' order (True per row without it).

    rows: as `insert_row`'s values, every row with the same fields. The statement text is built
    once per model, shape and row count. Raises IntegrityError for a constraint violation (no row
    is then stored). Model `save()` overrides and signals are not run.
    """
    if not rows:
        return []
    prepared = [_column_values(model, values, adding=True) for values in rows]
    columns = prepared[0][0]
    key = ("insert_many", model._meta.db_table, tuple(columns), returning, len(rows), connection.vendor)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        one = f"({', '.join(['%s'] * len(columns))})"
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "
               f"VALUES {', '.join([one] * len(rows))} "
               f"RETURNING {quote(model._meta.get_field(returning or model._meta.pk.name).column)}")
        _SQL_CACHE[key] = sql
    params = [value for _, values in prepared for value in values]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        stored = [row[0] for row in cursor.fetchall()]
    # PostgreSQL and SQLite return the rows of a multi-row VALUES in their order (Django's
    # bulk_create relies on the same); checked, since a caller pairs them with its rows.
    if len(stored) != len(rows):
        raise AssertionError("multi-row INSERT returned a different number of rows")
    return stored if returning else [True] * len(rows)


def update_row(model, pk, values: dict, *, where: dict | None = None, returning: tuple[str, ...] = ()):
    """UPDATE the given fields of the `model` row with primary key `pk` in one round trip.

    values: field name -> Python value; auto_now fields are not touched unless given. where: extra
    equality conditions, field name -> value (None matches NULL), for a compare-and-set. Returns the
    number of rows changed (0 or 1); with `returning` (field names), the changed row's stored values
    of those fields as a dict (`UPDATE ... RETURNING`, PostgreSQL and SQLite >= 3.35), or None when
    no row matched. Model `save()` overrides and signals are not run.
    """
    columns, params = _column_values(model, values, adding=False)
    conditions = [(model._meta.get_field(name), value) for name, value in (where or {}).items()]
    shape = tuple((field.column, value is None) for field, value in conditions)
    back = [model._meta.get_field(name) for name in returning]
    key = ("update", model._meta.db_table, tuple(columns), shape, tuple(f.column for f in back), connection.vendor)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
        tests = "".join(f" AND {quote(column)} IS NULL" if is_null else f" AND {quote(column)} = %s"
                        for column, is_null in shape)
        sql = (f"UPDATE {quote(model._meta.db_table)} SET {assignments} "
               f"WHERE {quote(model._meta.pk.column)} = %s{tests}")
        if back:
            sql += " RETURNING " + ", ".join(quote(f.column) for f in back)
        _SQL_CACHE[key] = sql
    params.append(model._meta.pk.get_db_prep_value(pk, connection))
    params += [field.get_db_prep_value(value, connection) for field, value in conditions if value is not None]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not back:
            return cursor.rowcount
        row = cursor.fetchone()
    if row is None:
        return None
    converted = {}
    for field, value in zip(back, row):
        for converter in connection.ops.get_db_converters(field.get_col(model._meta.db_table)) + \
                field.get_db_converters(connection):
            value = converter(value, field.get_col(model._meta.db_table), connection)
        converted[field.attname] = value
    return converted


# -- what a block of code wrote ----------------------------------------------------------------

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
