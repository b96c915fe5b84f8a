"""Reading rows without the ORM's compiler.

A queryset is compiled to SQL each time it runs: 0.5-2 ms of Python for the hot path's lookups
with joins, row locks and subqueries (the run claim's lock read compiled in 1.85 ms against
0.2 ms for a round trip). `select_rows` builds its statement once per model and shape from the
model's metadata and turns each row into model instances with the fields' own converters (JSON,
UUID, datetimes stay Django's), as `Model.from_db` does.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import connection

from core.sql.literals import identifier_sql
from core.sql.values import SQL_CACHE, column_values, convert_value, default_connection


# Rows read by unlocked `select_rows` inside `shared_reads()`: (statement, parameters) -> rows.
_SHARED: ContextVar[dict | None] = ContextVar("select_rows_shared", default=None)


@contextmanager
def shared_reads(memo: dict | None = None) -> Iterator[dict]:
    """Within this block an unlocked `select_rows` that repeats a statement with the same
    parameters answers from the rows the first one read (new instances, copies of the values) instead of
    asking the database again. For short read-only stretches of one transaction whose readers
    look the same row up (a gated call's precheck and its approval context): the caller writes
    nothing inside them. Locked reads (`for_update`) always go to the database.

    memo: the rows of an earlier block to share again (what that block yielded); None starts
    empty. Yields the memo; nothing is kept once the caller drops it."""
    memo = {} if memo is None else memo
    token = _SHARED.set(memo)
    try:
        yield memo
    finally:
        _SHARED.reset(token)


_LOOKUPS = {"exact": "= %s", "gt": "> %s", "gte": ">= %s", "lt": "< %s", "lte": "<= %s"}


def select_rows(model, where: dict, *, any_of: dict | None = None, related: tuple[str, ...] = (),
                for_update: bool | str = False, order_by: tuple[str, ...] = (), limit: int | None = None,
                extra: dict[str, str] | None = None, only: tuple[str, ...] = ()) -> list:
    """SELECT rows of `model` in one round trip and return them as model instances.

    where: conditions ANDed, `field` or `field__lookup` (exact, gt, gte, lt, lte, in, isnull) ->
    value, and `ne` (not equal, NULL included, as `exclude(field=value)`); an exact None matches
    NULL, `__in` takes a list (an empty list matches nothing and sends
    no statement). `__in_literal` takes the code's own constant names (identifiers such as status
    codes, never input; ValueError otherwise) and writes them into the statement instead of binding
    them, so that a partial index whose predicate names them serves the statement in a prepared
    statement's generic plan too. any_of: conditions of the same form ORed together, the group ANDed with `where`
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
    built = SQL_CACHE.get(key)
    if built is None:
        built = SQL_CACHE[key] = _build_select(model, shape, related, for_update, order_by, limit, extra or {},
                                                only)
    sql, plan = built
    if plan is None:
        return []
    shared = None if for_update else _SHARED.get()
    if shared is not None:
        try:
            memo = (sql, tuple(params))
            rows = shared.get(memo)
        except TypeError:  # a parameter that cannot be a key (a JSON adapter): not shared
            shared = rows = None
        if rows is not None:  # JSON values copied: an instance never shares a mutable value with another
            return [_instance(plan, copy.deepcopy(row)) for row in rows]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if shared is not None:
        shared[memo] = rows
    return [_instance(plan, row) for row in rows]


def update_rows(model, where: dict, values: dict) -> list:
    """UPDATE the rows of `model` matching `where` (as `select_rows`' conditions) to `values` in one
    round trip; returns the changed rows as model instances (`UPDATE ... RETURNING`, PostgreSQL and
    SQLite >= 3.35): a compare-and-set that also reads what it changed. auto_now fields are not
    touched unless given. Raises FieldDoesNotExist for an unknown name.
    """
    meta = model._meta
    columns, params = column_values(model, values, adding=False)
    shape: list = []
    _conditions(meta, where, shape, params)
    key = ("update_rows", meta.label, tuple(columns), tuple(shape), connection.vendor)
    sql = SQL_CACHE.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        base = quote(meta.db_table)
        _, plan = _build_select(model, (), (), False, (), None, {})  # the instance plan: every column
        tests = [_test(base, *condition) for condition in shape]
        sql = (f"UPDATE {base} SET {', '.join(f'{quote(c)} = %s' for c in columns)}"
               + (f" WHERE {' AND '.join(tests)}" if tests else "")
               + " RETURNING " + ", ".join(f"{base}.{quote(f.column)}" for f in meta.concrete_fields))
        SQL_CACHE[key] = sql = (sql, plan)
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
    db = default_connection()
    for name, value in where.items():
        field_name, _, lookup = name.partition("__")
        lookup = lookup or "exact"
        field = _field(meta, field_name)
        if lookup == "in_literal":
            values = tuple(value)
            if not values or not all(isinstance(v, str) and v.isidentifier() for v in values):
                raise ValueError(f"{name}: in_literal takes the code's own names (identifiers), not {values!r}")
            shape.append((field.column, "in_literal", values))
        elif lookup == "in":
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
    if lookup == "in_literal":  # identifiers only (checked in _conditions): safe to quote inline
        return f"{base}.{quote(column)} IN ({', '.join(identifier_sql(v) for v in size)})"
    if lookup == "isnull":
        return f"{base}.{quote(column)} IS {'' if size else 'NOT '}NULL"
    if lookup == "ne":  # as Django's exclude(field=value): a NULL is not equal to the value
        return f"({base}.{quote(column)} <> %s OR {base}.{quote(column)} IS NULL)"
    return f"{base}.{quote(column)} {_LOOKUPS[lookup]}"


def _from_row(model, alias: str, values, fields=None) -> object:
    fields = fields or model._meta.concrete_fields
    db = default_connection()
    converted = [convert_value(field, alias, value, db) for field, value in zip(fields, values)]
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
