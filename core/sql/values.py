"""Field values to and from the database for the prebuilt statements, with the fields' own
converters (`get_db_prep_save`, `get_db_converters`), and the statement-text cache they share."""
from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone


def default_connection():
    """The default connection's wrapper itself. `django.db.connection` is a proxy that looks the
    wrapper up (a thread-local read) on every attribute access; the per-value conversions below
    pass the wrapper on once instead (hundreds of lookups per governed cycle)."""
    return connections[DEFAULT_DB_ALIAS]


SQL_CACHE: dict[tuple, str] = {}


def column_values(model, values: dict, *, adding: bool) -> tuple[list[str], list]:
    """Columns and database values of `values` (field name -> Python value) for `model`.

    adding: fields not given take their default, or now for auto_now / auto_now_add; an auto
    primary key is left to the database. Raises FieldDoesNotExist for an unknown name.
    """
    columns, params = [], []
    now = None
    db = default_connection()
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


def mark_stored(obj, pk) -> None:
    """Mark the instance `obj` as read from the database with primary key `pk`."""
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def instance_values(obj) -> tuple[dict, bool]:
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


_CONVERTERS: dict[tuple, list] = {}


def convert_value(field, alias: str, value, db=None):
    """`value` as read from the database -> the field's Python value (Django's converters).
    db: the connection's wrapper (`default_connection()`), when the caller already holds it."""
    if value is None:
        return None
    db = db or default_connection()
    key = (field, alias, db.vendor)  # Fields compare equal only within one model (creation order + model)
    found = _CONVERTERS.get(key)
    if found is None:
        col = field.get_col(alias)
        found = _CONVERTERS[key] = (col, db.ops.get_db_converters(col) + field.get_db_converters(db))
    col, converters = found
    for converter in converters:
        value = converter(value, col, db)
    return value
