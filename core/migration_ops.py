"""Migration operations that build and drop indexes without blocking writes on PostgreSQL.

`CREATE INDEX` holds a lock that blocks every INSERT, UPDATE and DELETE on the table for the whole
build: on a confirmation-request or audit table of millions of rows that is every governed call
of every tenant, for seconds to minutes. `CREATE INDEX CONCURRENTLY` builds while writes go on
(Django's `django.contrib.postgres.operations.AddIndexConcurrently`), but it cannot run inside a
transaction and exists on PostgreSQL only. These operations use it on PostgreSQL and the plain
operation elsewhere (SQLite, the embedded default), so one migration serves both. A migration
using them sets `atomic = False`. Should a concurrent build fail halfway (a deadlock, a
cancelled statement), PostgreSQL leaves an INVALID index behind: drop it and run `migrate` again
(docs/operations.md, "Upgrading").
"""
from __future__ import annotations

from django.contrib.postgres import operations as postgres
from django.db.migrations.operations import AddIndex, AlterField, RemoveIndex
from django.db.migrations.operations.base import Operation


class _PlainOffPostgres:
    """Runs the concurrent PostgreSQL operation (the next class in the MRO) on PostgreSQL and the
    plain operation `plain` on any other database."""

    plain: type

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return self.plain.database_forwards(self, app_label, schema_editor, from_state, to_state)
        return super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return self.plain.database_backwards(self, app_label, schema_editor, from_state, to_state)
        return super().database_backwards(app_label, schema_editor, from_state, to_state)


class AddIndexConcurrently(_PlainOffPostgres, postgres.AddIndexConcurrently):
    """`AddIndex`, built with `CREATE INDEX CONCURRENTLY` on PostgreSQL (the migration must set
    `atomic = False`; raises NotSupportedError inside a transaction there)."""

    plain = AddIndex


class RemoveIndexConcurrently(_PlainOffPostgres, postgres.RemoveIndexConcurrently):
    """`RemoveIndex`, dropped with `DROP INDEX CONCURRENTLY` on PostgreSQL (the migration must set
    `atomic = False`)."""

    plain = RemoveIndex


class AlterFieldDropIndexConcurrently(AlterField):
    """`AlterField` that takes a field's own index away (`db_index=True` -> False, a foreign key's
    included): on PostgreSQL the field's single-column indexes (the btree and its `_like` twin
    for text) go with `DROP INDEX CONCURRENTLY`, which waits for no lock queue behind a long
    transaction (the migration must set `atomic = False`); elsewhere, and backwards, Django's own
    `AlterField`. Unique and primary-key indexes are never dropped by it."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        column = model._meta.get_field(self.name).column
        names = schema_editor._constraint_names(model, [column], index=True, unique=False, primary_key=False)
        for name in sorted(names):
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        # AlterField's own backwards calls `self.database_forwards` (this class's): build the
        # index again with Django's forwards instead.
        return super().database_forwards(app_label, schema_editor, from_state, to_state)


class DropPatternIndexConcurrently(Operation):
    """Drop the `varchar_pattern_ops` twin (`<table>_<column>_<hash>_like`) that Django's PostgreSQL
    backend builds beside the index of an indexed or unique text field, for a field never searched
    with LIKE / `startswith`: every INSERT and non-HOT UPDATE pays for it. PostgreSQL only
    (`DROP INDEX CONCURRENTLY`, the migration sets `atomic = False`); nothing elsewhere. Backwards
    it is built again (`CREATE INDEX CONCURRENTLY`). The model state does not change: Django keeps
    no record of these indexes."""

    reduces_to_sql = False
    reversible = True

    def __init__(self, model_name: str, name: str) -> None:
        self.model_name, self.name = model_name, name

    def deconstruct(self):
        return self.__class__.__name__, [], {"model_name": self.model_name, "name": self.name}

    def state_forwards(self, app_label, state):
        pass

    def _index(self, app_label, schema_editor, state) -> tuple[str, str, str]:
        model = state.apps.get_model(app_label, self.model_name)
        column = model._meta.get_field(self.name).column
        name = schema_editor._create_index_name(model._meta.db_table, [column], suffix="_like")
        return model._meta.db_table, column, name

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            _, _, name = self._index(app_label, schema_editor, from_state)
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            table, column, name = self._index(app_label, schema_editor, to_state)
            quote = schema_editor.quote_name
            schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(name)} ON {quote(table)} "
                                  f"({quote(column)} varchar_pattern_ops)")

    def describe(self):
        return f"Drop the LIKE index of {self.model_name}.{self.name}"
