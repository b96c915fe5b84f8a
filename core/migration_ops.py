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
from django.db.migrations.operations import AddIndex, RemoveIndex


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
