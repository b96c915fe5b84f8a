"""Several writes of one transaction in one round trip (`Together`)."""
from __future__ import annotations

from typing import Callable

from django.db import connection

from core.sql.statements import insert_many_statement, update_one_statement
from core.sql.values import convert_value, instance_values, mark_stored


class Together:
    """INSERTs and single-row UPDATEs of one transaction sent in one round trip.

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
        sql, params = insert_many_statement(model, rows, returning)
        self._parts.append((sql, params, lambda value: convert_value(field, model._meta.db_table, value)))
        return len(self._parts) - 1

    def insert_instance(self, obj) -> int:
        """Add the INSERT of the unsaved model instance `obj` (as `insert_instance`); once sent, `obj`
        is stored (its database-assigned key set). Returns the index of its result in `send()`."""
        values, _ = instance_values(obj)
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
        sql, params = update_one_statement(model, pk, values, where, [model._meta.pk])
        self._parts.append((sql, params, lambda value: convert_value(model._meta.pk, model._meta.db_table, value)))
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
            mark_stored(obj, converted[index][0])
        return converted
