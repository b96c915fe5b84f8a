"""Django's PostgreSQL backend (psycopg 3), with one round trip less per successful savepoint.

A nested `transaction.atomic()` that succeeds ends with `RELEASE SAVEPOINT`, one round trip of its
own. PostgreSQL does not need it: every savepoint is released when its transaction commits or
rolls back, and `ROLLBACK TO SAVEPOINT` of an outer savepoint also discards the inner ones
(PostgreSQL manual, SAVEPOINT and RELEASE SAVEPOINT: releasing "does not undo the effects of
commands executed after the savepoint" and only "frees their resources"). A released
subtransaction's locks and XID pass to its parent either way, so keeping it open until the end
of a short step changes nothing a reader of the data can see.

The governed call has up to three savepoints per step (the consumption, the action, the request
for a confirmation); the approve-and-resume cycle saves three round trips. Selected by
`agentplatform.settings` for every PostgreSQL DATABASE_URL (DB_RELEASE_SAVEPOINTS=true keeps
Django's behaviour).
"""
from __future__ import annotations

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    """`django.db.backends.postgresql`'s wrapper; a successful savepoint is left to its transaction."""

    def _savepoint_commit(self, sid: str) -> None:
        """Do not send RELEASE SAVEPOINT `sid`: the transaction's end releases it (module docstring)."""
        return None
