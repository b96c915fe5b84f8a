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

from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _db():
    """The default connection's wrapper itself. `django.db.connection` is a proxy that looks the
    wrapper up (a thread-local read) on every attribute access; the per-value conversions below
    pass the wrapper on once instead (hundreds of lookups per governed cycle; issue 11)."""
    return connections[DEFAULT_DB_ALIAS]


def transaction_usable() -> bool:
    """False when the current transaction can only be rolled back: Django marked it, or
    PostgreSQL aborted it (a failed statement outside a savepoint). A database error that a nested
    `atomic` contained (its savepoint rolled back) leaves it usable; so does autocommit."""
    db = _db()
    if db.needs_rollback:
        return False
    if db.vendor == "postgresql" and db.connection is not None:
        from psycopg import pq

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
    db = _db()
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
    db = _db()
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
        params.append(field.get_db_prep_save(value, db))
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


def insert_instance(obj):
    """INSERT the unsaved model instance `obj` in one round trip, as `save(force_insert=True)`
    would, without compiling a query (issue 11); returns `obj`, now stored.

    Every concrete field is written with its `pre_save` value (auto_now / auto_now_add set now,
    on the instance too); an auto primary key is the database's and is set on `obj`. Model
    `save()` overrides and signals are not run: use it only for models that have none. Raises
    IntegrityError for a constraint violation.
    """
    meta = obj._meta
    values, assigned = _instance_values(obj)
    if assigned:
        _stored(obj, _convert(meta.pk, meta.db_table, insert_row(type(obj), values, returning=meta.pk.name)))
    else:
        insert_row(type(obj), values)
        _stored(obj, obj.pk)
    return obj


def _stored(obj, pk) -> None:
    """Mark the instance `obj` as read from the database with primary key `pk`."""
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def _instance_values(obj) -> tuple[dict, bool]:
    """(attname -> value to store for the unsaved `obj`, whether the database assigns its key):
    every concrete field's `pre_save` value (auto_now / auto_now_add set now, on `obj` too)."""
    values = {}
    assigned = False
    for field in obj._meta.concrete_fields:
        if field.primary_key and field.db_returning and getattr(obj, field.attname) is None:
            assigned = True
            continue  # AutoField / BigAutoField: the database assigns it
        values[field.attname] = field.pre_save(obj, add=True)
    return values, assigned


def insert_rows(model, rows: list[dict], *, returning: str | None = None) -> list:
    """INSERT several rows of `model` in one round trip (one multi-row statement); returns the
    `returning` column's values in the rows' order (True per row without it).

    rows: as `insert_row`'s values, every row with the same fields. The statement text is built
    once per model, shape and row count. Raises IntegrityError for a constraint violation (no row
    is then stored). Model `save()` overrides and signals are not run.
    """
    if not rows:
        return []
    sql, params = _insert_many(model, rows, returning)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        stored = [row[0] for row in cursor.fetchall()]
    # PostgreSQL and SQLite return the rows of a multi-row VALUES in their order (Django's
    # bulk_create relies on the same); checked, since a caller pairs them with its rows.
    if len(stored) != len(rows):
        raise AssertionError("multi-row INSERT returned a different number of rows")
    return stored if returning else [True] * len(rows)


def _insert_many(model, rows: list[dict], returning: str | None) -> tuple[str, list]:
    """(INSERT ... VALUES (...), ... RETURNING <returning or pk>, params) for `rows` of `model`."""
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
    return sql, [value for _, values in prepared for value in values]


def update_row(model, pk, values: dict, *, where: dict | None = None, returning: tuple[str, ...] = ()):
    """UPDATE the given fields of the `model` row with primary key `pk` in one round trip.

    values: field name -> Python value; auto_now fields are not touched unless given. where: extra
    equality conditions, field name -> value (None matches NULL), for a compare-and-set. Returns the
    number of rows changed (0 or 1); with `returning` (field names), the changed row's stored values
    of those fields as a dict (`UPDATE ... RETURNING`, PostgreSQL and SQLite >= 3.35), or None when
    no row matched. Model `save()` overrides and signals are not run.
    """
    back = [model._meta.get_field(name) for name in returning]
    sql, params = _update_one(model, pk, values, where, back)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not back:
            return cursor.rowcount
        row = cursor.fetchone()
    if row is None:
        return None
    return {field.attname: _convert(field, model._meta.db_table, value) for field, value in zip(back, row)}


def _update_one(model, pk, values: dict, where: dict | None, back: list) -> tuple[str, list]:
    """(UPDATE ... WHERE pk = %s AND <where> [RETURNING <back>], params) for one row of `model`."""
    columns, params = _column_values(model, values, adding=False)
    conditions = [(model._meta.get_field(name), value) for name, value in (where or {}).items()]
    shape = tuple((field.column, value is None) for field, value in conditions)
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
    db = _db()
    params.append(model._meta.pk.get_db_prep_value(pk, db))
    params += [field.get_db_prep_value(value, db) for field, value in conditions if value is not None]
    return sql, params


class Together:
    """INSERTs and single-row UPDATEs of one transaction sent in one round trip (issue 11).

    On PostgreSQL the statements become the data-modifying parts of one statement
    (`WITH s0 AS (INSERT ... RETURNING ...), s1 AS (UPDATE ... RETURNING ...) SELECT ARRAY(...),
    ...`): every part runs exactly once and all see the same snapshot (PostgreSQL manual, 7.8.4
    "Data-Modifying Statements in WITH"); Django's foreign keys are DEFERRABLE INITIALLY DEFERRED,
    so a part may refer to a row another part inserts.
    Parts must therefore touch different rows (a row changed twice in one statement is undefined).
    Elsewhere (SQLite) they run one after the other. Either way they are part of the caller's
    transaction, which must be open. A constraint violation raises IntegrityError for all of them.
    """

    def __init__(self) -> None:
        self._parts: list[tuple[str, list, Callable]] = []
        self._stored: list[tuple[int, object]] = []  # (part, instance) of insert_instance

    def insert(self, model, rows: list[dict], *, returning: str | None = None) -> int:
        """Add a multi-row INSERT (as `insert_rows`); returns the index of its result in `send()`:
        the `returning` (default: primary key) values, in the rows' order."""
        field = model._meta.get_field(returning or model._meta.pk.name)
        sql, params = _insert_many(model, rows, returning)
        self._parts.append((sql, params, lambda value: _convert(field, model._meta.db_table, value)))
        return len(self._parts) - 1

    def insert_instance(self, obj) -> int:
        """Add the INSERT of the unsaved model instance `obj` (as `insert_instance`); once sent, `obj`
        is stored (its database-assigned key set). Returns the index of its result in `send()`."""
        values, _ = _instance_values(obj)
        index = self.insert(type(obj), [values])
        self._stored.append((index, obj))
        return index

    def statement(self, sql: str, params: list) -> int:
        """Add one data-modifying statement of the caller's, whose RETURNING clause names one
        column and ends the text (e.g. `admission_statement` of the model-call quota); returns the
        index of its values (unconverted) in `send()`."""
        self._parts.append((sql, list(params), lambda value: value))
        return len(self._parts) - 1

    def update(self, model, pk, values: dict, *, where: dict | None = None) -> int:
        """Add an UPDATE of one row (as `update_row`); returns the index of its result in `send()`:
        the primary keys of the changed rows ([] when `where` did not match)."""
        sql, params = _update_one(model, pk, values, where, [model._meta.pk])
        self._parts.append((sql, params, lambda value: _convert(model._meta.pk, model._meta.db_table, value)))
        return len(self._parts) - 1

    def send(self) -> list[list]:
        """Run every part; returns one list of returned values per part, in the order added."""
        parts, self._parts = self._parts, []
        if not parts:
            return []
        if not connection.in_atomic_block:
            raise RuntimeError("Together.send() needs an open transaction")
        with connection.cursor() as cursor:
            if connection.vendor != "postgresql" or len(parts) == 1:
                results = []
                for sql, params, _ in parts:
                    cursor.execute(sql, params)
                    results.append([row[0] for row in cursor.fetchall()])
            else:
                # "RETURNING x" -> "RETURNING x AS r" so the outer SELECT can name the column.
                body = ", ".join(f"s{i} AS ({sql} AS r)" for i, (sql, _, _) in enumerate(parts))
                arrays = ", ".join(f"ARRAY(SELECT r FROM s{i})" for i in range(len(parts)))
                cursor.execute(f"WITH {body} SELECT {arrays}", [p for _, params, _ in parts for p in params])
                results = [list(values) for values in cursor.fetchone()]
        converted = [[convert(v) for v in values] for (_, _, convert), values in zip(parts, results)]
        stored, self._stored = self._stored, []
        for index, obj in stored:
            _stored(obj, converted[index][0])
        return converted


# -- reading rows without the ORM's compiler ---------------------------------------------------
#
# A queryset is compiled to SQL each time it runs: 0.5-2 ms of Python for the hot path's lookups
# with joins, row locks and subqueries (the run claim's lock read compiled in 1.85 ms against
# 0.2 ms for a round trip on the reference VM; issue 11). `select_rows` builds its statement once
# per model and shape from the model's metadata and turns each row into model instances with the
# fields' own converters (JSON, UUID, datetimes stay Django's), as `Model.from_db` does.

_LOOKUPS = {"exact": "= %s", "gt": "> %s", "gte": ">= %s", "lt": "< %s", "lte": "<= %s"}
_CONVERTERS: dict[tuple, list] = {}


def _convert(field, alias: str, value, db=None):
    """`value` as read from the database -> the field's Python value (Django's converters).
    db: the connection's wrapper (`_db()`), when the caller already holds it."""
    if value is None:
        return None
    db = db or _db()
    key = (field, alias, db.vendor)  # Fields compare equal only within one model (creation order + model)
    found = _CONVERTERS.get(key)
    if found is None:
        col = field.get_col(alias)
        found = _CONVERTERS[key] = (col, db.ops.get_db_converters(col) + field.get_db_converters(db))
    col, converters = found
    for converter in converters:
        value = converter(value, col, db)
    return value


def select_rows(model, where: dict, *, any_of: dict | None = None, related: tuple[str, ...] = (),
                for_update: bool | str = False, order_by: tuple[str, ...] = (), limit: int | None = None,
                extra: dict[str, str] | None = None, only: tuple[str, ...] = ()) -> list:
    """SELECT rows of `model` in one round trip and return them as model instances.

    where: conditions ANDed, `field` or `field__lookup` (exact, gt, gte, lt, lte, in, isnull) ->
    value, and `ne` (not equal, NULL included, as `exclude(field=value)`); an exact None matches
    NULL, `__in` takes a list (an empty list matches nothing and sends
    no statement). any_of: conditions of the same form ORed together, the group ANDed with `where`
    (an empty group matches nothing). related: names of foreign keys whose rows are joined and set on each instance,
    as `select_related` does (a NULL key sets None). for_update: lock the rows of `model` only
    (True: `FOR UPDATE OF`; "no key": `FOR NO KEY UPDATE OF`, the lock an UPDATE that changes no
    key takes, which foreign-key checks of new rows pointing at it do not wait for; PostgreSQL.
    SQLite locks the database on write anyway, as Django's `select_for_update` there). only:
    field names to read (the others are deferred, as `only()`; the primary key is always read).
    order_by: field names, "-" for descending. extra: attribute name ->
    a scalar SQL expression where `{t}` stands for the model's table (e.g. a correlated MAX),
    set on each instance unconverted. Raises FieldDoesNotExist for an unknown name.
    """
    meta = model._meta
    shape: list = []
    params: list = []
    if any_of is not None:
        if not any_of:
            return []
        group: list = []
        _conditions(meta, any_of, group, params)
        shape.append((tuple(group), "any", 0))
    _conditions(meta, where, shape, params)
    key = ("select", meta.label, tuple(shape), related, for_update, order_by, limit,
           tuple(sorted((extra or {}).items())), only, connection.vendor)
    built = _SQL_CACHE.get(key)
    if built is None:
        built = _SQL_CACHE[key] = _build_select(model, shape, related, for_update, order_by, limit, extra or {},
                                                only)
    sql, plan = built
    if plan is None:
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [_instance(plan, row) for row in rows]


def update_rows(model, where: dict, values: dict) -> list:
    """UPDATE the rows of `model` matching `where` (as `select_rows`' conditions) to `values` in one
    round trip; returns the changed rows as model instances (`UPDATE ... RETURNING`, PostgreSQL and
    SQLite >= 3.35): a compare-and-set that also reads what it changed. auto_now fields are not
    touched unless given. Raises FieldDoesNotExist for an unknown name.
    """
    meta = model._meta
    columns, params = _column_values(model, values, adding=False)
    shape: list = []
    _conditions(meta, where, shape, params)
    key = ("update_rows", meta.label, tuple(columns), tuple(shape), connection.vendor)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        base = quote(meta.db_table)
        _, plan = _build_select(model, (), (), False, (), None, {})  # the instance plan: every column
        tests = [_test(base, *condition) for condition in shape]
        sql = (f"UPDATE {base} SET {', '.join(f'{quote(c)} = %s' for c in columns)}"
               + (f" WHERE {' AND '.join(tests)}" if tests else "")
               + " RETURNING " + ", ".join(f"{base}.{quote(f.column)}" for f in meta.concrete_fields))
        _SQL_CACHE[key] = sql = (sql, plan)
    sql, plan = sql
    if any(lookup == "in" and not size for _, lookup, size in shape):
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [_instance(plan, row) for row in rows]


def _field(meta, name: str):
    """The field called `name` ("pk": the primary key). Raises FieldDoesNotExist."""
    return meta.pk if name == "pk" else meta.get_field(name)


def _conditions(meta, where: dict, shape: list, params: list) -> None:
    """Append the (column, lookup, size) shape and the database values of `where` (select_rows)."""
    db = _db()
    for name, value in where.items():
        field_name, _, lookup = name.partition("__")
        lookup = lookup or "exact"
        field = _field(meta, field_name)
        if lookup == "in":
            values = list(value)
            shape.append((field.column, "in", len(values)))  # empty: the statement matches nothing
            params += [field.get_db_prep_value(v, db) for v in values]
        elif lookup == "isnull" or (lookup == "exact" and value is None):
            shape.append((field.column, "isnull", bool(value) if lookup == "isnull" else True))
        elif lookup in _LOOKUPS or lookup == "ne":
            shape.append((field.column, lookup, 0))
            params.append(field.get_db_prep_value(value, db))
        else:
            raise ValueError(f"unsupported lookup {lookup!r}")


def _build_select(model, shape, related, for_update, order_by, limit, extra, only=()):
    quote = connection.ops.quote_name
    meta = model._meta
    base = quote(meta.db_table)
    fields = [f for f in meta.concrete_fields if not only or f.primary_key or f.name in only or f.attname in only]
    columns = [f"{base}.{quote(f.column)}" for f in fields]
    joins = []
    parts = []  # (model, alias, attribute, first column index)
    for index, name in enumerate(related):
        fk = meta.get_field(name)
        target = fk.related_model
        alias = f"r{index}"
        kind = "LEFT OUTER JOIN" if fk.null else "INNER JOIN"
        joins.append(f"{kind} {quote(target._meta.db_table)} {alias} ON {alias}.{quote(fk.target_field.column)} = "
                     f"{base}.{quote(fk.column)}")
        parts.append((target, alias, name, len(columns)))
        columns += [f"{alias}.{quote(f.column)}" for f in target._meta.concrete_fields]
    extras = list(extra.items())
    columns += [f"({expression.format(t=base)})" for _, expression in extras]
    if any(lookup == "in" and not size for _, lookup, size in shape):
        return "", None  # an empty IN list ANDed: nothing matches, nothing is sent

    tests = [_test(base, *condition) for condition in shape]
    sql = f"SELECT {', '.join(columns)} FROM {base}"
    if joins:
        sql += " " + " ".join(joins)
    if tests:
        sql += " WHERE " + " AND ".join(tests)
    if order_by:
        sql += " ORDER BY " + ", ".join(
            f"{base}.{quote(_field(meta, name.lstrip('-')).column)}{' DESC' if name.startswith('-') else ''}"
            for name in order_by)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    if for_update and connection.features.has_select_for_update:
        strength = "NO KEY UPDATE" if for_update == "no key" and connection.vendor == "postgresql" else "UPDATE"
        sql += f" FOR {strength}" + (f" OF {base}" if connection.features.has_select_for_update_of else "")
    plan = ((model, meta.db_table, 0, tuple(fields)),
            [(target, alias, name, start, len(target._meta.concrete_fields)) for target, alias, name, start in parts],
            [(name, len(columns) - len(extras) + i) for i, (name, _) in enumerate(extras)])
    return sql, plan


def _test(base: str, column, lookup: str, size) -> str:
    """One condition of a WHERE clause on table `base` (a quoted name), from its shape."""
    quote = connection.ops.quote_name
    if lookup == "any":
        return "(" + " OR ".join(_test(base, *inner) for inner in column) + ")"
    if lookup == "in":
        return f"{base}.{quote(column)} IN ({', '.join(['%s'] * size)})" if size else "1 = 0"
    if lookup == "isnull":
        return f"{base}.{quote(column)} IS {'' if size else 'NOT '}NULL"
    if lookup == "ne":  # as Django's exclude(field=value): a NULL is not equal to the value
        return f"({base}.{quote(column)} <> %s OR {base}.{quote(column)} IS NULL)"
    return f"{base}.{quote(column)} {_LOOKUPS[lookup]}"


def _from_row(model, alias: str, values, fields=None) -> object:
    fields = fields or model._meta.concrete_fields
    db = _db()
    converted = [_convert(field, alias, value, db) for field, value in zip(fields, values)]
    return model.from_db(db.alias, [f.attname for f in fields], converted)


def _instance(plan, row):
    (model, table, start, fields), parts, extras = plan
    obj = _from_row(model, table, row[start:start + len(fields)], fields)
    for target, alias, name, begin, size in parts:
        values = row[begin:begin + size]
        setattr(obj, name, None if all(v is None for v in values) else _from_row(target, alias, values))
    for name, index in extras:
        setattr(obj, name, row[index])
    return obj


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
