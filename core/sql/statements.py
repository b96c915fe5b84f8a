"""Single-row statements on the hot path.

The governed call writes an idempotency claim, its result and an audit row. Through the ORM each
of those costs about 0.45 ms of Python (query compile), against about 0.15 ms for the same
statement sent as text (bench/governance_overhead.py). These helpers build each statement's text
once per model and shape, and convert values with the fields' own `get_db_prep_save`, so backend
conversions (UUID, JSON, datetimes) stay Django's.
"""
from __future__ import annotations

from django.db import connection

from core.sql.values import SQL_CACHE, column_values, convert_value, default_connection, instance_values, mark_stored


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
    columns, params = column_values(model, values, adding=True)
    key = ("insert", model._meta.db_table, tuple(columns), conflict_fields, returning, connection.vendor)
    sql = SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "
               f"VALUES ({', '.join(['%s'] * len(columns))})")
        if conflict_fields:
            targets = ", ".join(quote(model._meta.get_field(name).column) for name in conflict_fields)
            sql += f" ON CONFLICT ({targets}) DO NOTHING"
        sql += f" RETURNING {quote(model._meta.get_field(returning or model._meta.pk.name).column)}"
        SQL_CACHE[key] = sql
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    return row[0] if returning else True


def insert_instance(obj):
    """INSERT the unsaved model instance `obj` in one round trip, as `save(force_insert=True)`
    would, without compiling a query; returns `obj`, now stored.

    Every concrete field is written with its `pre_save` value (auto_now / auto_now_add set now,
    on the instance too); an auto primary key is the database's and is set on `obj`. Model
    `save()` overrides and signals are not run: use it only for models that have none. Raises
    IntegrityError for a constraint violation.
    """
    meta = obj._meta
    values, assigned = instance_values(obj)
    if assigned:
        mark_stored(obj, convert_value(meta.pk, meta.db_table, insert_row(type(obj), values, returning=meta.pk.name)))
    else:
        insert_row(type(obj), values)
        mark_stored(obj, obj.pk)
    return obj


def insert_rows(model, rows: list[dict], *, returning: str | None = None) -> list:
    """INSERT several rows of `model` in one round trip (one multi-row statement); returns the
    `returning` column's values in the rows' order (True per row without it).

    rows: as `insert_row`'s values, every row with the same fields. The statement text is built
    once per model, shape and row count. Raises IntegrityError for a constraint violation (no row
    is then stored). Model `save()` overrides and signals are not run.
    """
    if not rows:
        return []
    sql, params = insert_many_statement(model, rows, returning)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        stored = [row[0] for row in cursor.fetchall()]
    # PostgreSQL and SQLite return the rows of a multi-row VALUES in their order (Django's
    # bulk_create relies on the same); checked, since a caller pairs them with its rows.
    if len(stored) != len(rows):
        raise AssertionError("multi-row INSERT returned a different number of rows")
    return stored if returning else [True] * len(rows)


def insert_many_statement(model, rows: list[dict], returning: str | None) -> tuple[str, list]:
    """(INSERT ... VALUES (...), ... RETURNING <returning or pk>, params) for `rows` of `model`."""
    prepared = [column_values(model, values, adding=True) for values in rows]
    columns = prepared[0][0]
    key = ("insert_many", model._meta.db_table, tuple(columns), returning, len(rows), connection.vendor)
    sql = SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        one = f"({', '.join(['%s'] * len(columns))})"
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "
               f"VALUES {', '.join([one] * len(rows))} "
               f"RETURNING {quote(model._meta.get_field(returning or model._meta.pk.name).column)}")
        SQL_CACHE[key] = sql
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
    sql, params = update_one_statement(model, pk, values, where, back)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not back:
            return cursor.rowcount
        row = cursor.fetchone()
    if row is None:
        return None
    return {field.attname: convert_value(field, model._meta.db_table, value) for field, value in zip(back, row)}


def update_one_statement(model, pk, values: dict, where: dict | None, back: list) -> tuple[str, list]:
    """(UPDATE ... WHERE pk = %s AND <where> [RETURNING <back>], params) for one row of `model`."""
    columns, params = column_values(model, values, adding=False)
    conditions = [(model._meta.get_field(name), value) for name, value in (where or {}).items()]
    shape = tuple((field.column, value is None) for field, value in conditions)
    key = ("update", model._meta.db_table, tuple(columns), shape, tuple(f.column for f in back), connection.vendor)
    sql = SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
        tests = "".join(f" AND {quote(column)} IS NULL" if is_null else f" AND {quote(column)} = %s"
                        for column, is_null in shape)
        sql = (f"UPDATE {quote(model._meta.db_table)} SET {assignments} "
               f"WHERE {quote(model._meta.pk.column)} = %s{tests}")
        if back:
            sql += " RETURNING " + ", ".join(quote(f.column) for f in back)
        SQL_CACHE[key] = sql
    db = default_connection()
    params.append(model._meta.pk.get_db_prep_value(pk, db))
    params += [field.get_db_prep_value(value, db) for field, value in conditions if value is not None]
    return sql, params
