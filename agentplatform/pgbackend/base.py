"""Django's PostgreSQL backend (psycopg 3), with one round trip less per successful savepoint, and
work run right before the COMMIT.

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

Hooks run before the COMMIT (core.sql.precommit.before_commit), their statements sent with the
COMMIT in one round trip: the audit chain appends a transaction's rows as its last statement, so
the tenant's chain head is locked for that statement and the COMMIT only (audit.chain). They are kept like Django keeps `on_commit` callbacks: each with
the savepoints open when it was registered, forgotten when one of them or the transaction rolls
back.

A savepoint is sent with the first statement after it, not on its own: `SAVEPOINT s` and that
statement go in one round trip (psycopg's pipeline mode), and a block that sends nothing before
it ends (or rolls back) costs nothing. The savepoint still exists before the statement runs, so a
failed statement rolls back to it exactly as before. Every cursor of the connection sends the
deferred savepoints first, whichever way it was opened (Django's, the raw psycopg connection's,
a named cursor's).
"""
from __future__ import annotations

import functools
from typing import Callable

from django.db.backends.postgresql import base
from psycopg import sql as psql


def _deferred(conn) -> list[str]:
    """The savepoints (ids, oldest first) not yet sent on the psycopg connection `conn`."""
    return getattr(conn, "deferred_savepoints", None) or []


def _send_deferred(cursor, query=None, params=None, kwargs=None, *, many=False):
    """Send `conn`'s deferred savepoints, then the query (if any) on `cursor`, in one round trip."""
    conn = cursor.connection
    sids, conn.deferred_savepoints = conn.deferred_savepoints, []
    with conn.pipeline():
        for sid in sids:
            conn.execute(psql.SQL("SAVEPOINT {}").format(psql.Identifier(sid)), prepare=False)
        if query is None:
            return None
        return (cursor._run_many if many else cursor._run_one)(query, params, kwargs or {})


class _SendsDeferredSavepoints:
    """A psycopg cursor that sends its connection's deferred savepoints with its next statement."""

    def _run_one(self, query, params, kwargs):
        return super().execute(query, params, **kwargs)

    def _run_many(self, query, params, kwargs):
        return super().executemany(query, params, **kwargs)

    def execute(self, query, params=None, **kwargs):
        if _deferred(self.connection):
            return _send_deferred(self, query, params, kwargs)
        return super().execute(query, params, **kwargs)

    def executemany(self, query, params_seq, **kwargs):
        if _deferred(self.connection):
            return _send_deferred(self, query, params_seq, kwargs, many=True)
        return super().executemany(query, params_seq, **kwargs)

    def copy(self, statement, *args, **kwargs):
        if _deferred(self.connection):
            _send_deferred(self)
        return super().copy(statement, *args, **kwargs)


class ServerBindingCursor(_SendsDeferredSavepoints, base.ServerBindingCursor):
    pass


class Cursor(_SendsDeferredSavepoints, base.Cursor):
    pass

Hook = Callable[[], Callable[[], None] | None]


class DatabaseWrapper(base.DatabaseWrapper):
    """`django.db.backends.postgresql`'s wrapper; a successful savepoint is left to its transaction,
    and `before_commit` hooks run right before the COMMIT."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # (savepoint ids open at registration, hook), in the order registered. A hook sends its
        # statements and may return a callable that reads their results after the COMMIT.
        self.run_before_commit: list[tuple[set[str], Hook]] = []

    def get_connection_params(self):
        params = super().get_connection_params()
        binding = params.get("cursor_factory")
        params["cursor_factory"] = ServerBindingCursor if binding is base.ServerBindingCursor else Cursor
        return params

    def get_new_connection(self, conn_params):
        conn = super().get_new_connection(conn_params)
        conn.deferred_savepoints = []
        return conn

    def create_cursor(self, name=None):
        if name and self.connection is not None and _deferred(self.connection):
            with self.connection.cursor() as cursor:  # a named cursor declares itself: send them first
                _send_deferred(cursor)
        return super().create_cursor(name)

    def _savepoint(self, sid: str) -> None:
        """Keep SAVEPOINT `sid` to send with the next statement (module docstring). The execute
        wrappers (`connection.execute_wrapper`) still see the statement now, as they did when it
        was sent on its own (core.sql.transactions.track_writes counts on it)."""
        def defer(sql, params, many, context):
            self.connection.deferred_savepoints = _deferred(self.connection) + [sid]

        executor = defer
        for wrapper in reversed(self.execute_wrappers):
            executor = functools.partial(wrapper, executor)
        executor(self.ops.savepoint_create_sql(sid), None, False, {"connection": self, "cursor": None})

    def _savepoint_rollback(self, sid: str) -> None:
        """Roll back to `sid`. Not sent yet: nothing ran since, so nothing is sent (it and the ones
        after it are forgotten); sent: the ones deferred after it are inside it and go too."""
        deferred = _deferred(self.connection)
        if sid in deferred:
            self.connection.deferred_savepoints = deferred[:deferred.index(sid)]
            return
        self.connection.deferred_savepoints = []
        super()._savepoint_rollback(sid)

    def _savepoint_commit(self, sid: str) -> None:
        """Do not send RELEASE SAVEPOINT `sid`: the transaction's end releases it (module docstring).
        One still deferred saw no statement: it is forgotten."""
        deferred = _deferred(self.connection)
        if sid in deferred:
            self.connection.deferred_savepoints = deferred[:deferred.index(sid)]
        return None

    def _forget_deferred(self) -> None:
        if self.connection is not None:
            self.connection.deferred_savepoints = []

    def _own_transaction_open(self) -> bool:
        """An atomic block of the code's own is open (not only a test case's, which rolls back)."""
        return self.in_atomic_block and not all(getattr(block, "_from_testcase", False)
                                                for block in self.atomic_blocks)

    def _test_end_unseen(self) -> bool:
        """Inside a test case's transaction, the code's outermost open block made no savepoint
        (`atomic(savepoint=False)`, as Django's deletion collector opens): its end sends nothing
        this wrapper sees, so nothing would stand in for its COMMIT."""
        for index, block in enumerate(self.atomic_blocks):
            if not getattr(block, "_from_testcase", False):
                return index > 0 and self.savepoint_ids[index - 1] is None
        return False

    def before_commit(self, func: Hook) -> bool:
        """Keep `func` to run right before this transaction's COMMIT; returns False (not kept: the
        caller runs it now) when no transaction of the code's own is open, or when, inside a test
        case's transaction, the end of the code's block could not be told (`_test_end_unseen`)."""
        if not self._own_transaction_open() or self._test_end_unseen():
            return False
        self.run_before_commit.append((set(self.savepoint_ids), func))
        return True

    def _run_before_commit(self) -> None:
        """Run the hooks now, one after the other, each finished at once."""
        while self.run_before_commit:
            _, func = self.run_before_commit.pop(0)
            finish = func()
            if callable(finish):
                finish()

    def commit(self) -> None:
        """Send the hooks' statements and the COMMIT in one round trip (psycopg's pipeline mode: the
        server runs them back to back, so a lock a hook's statement takes is held for the server's
        own work and the WAL flush, not for a round trip to this process and back), then let each
        hook read its results. A hook that raises, or a statement of one that fails, rolls the
        whole transaction back (the COMMIT is not run after a failed statement) and the error
        propagates."""
        self._forget_deferred()  # the COMMIT ends them all
        if not self.run_before_commit:
            return super().commit()
        self.validate_thread_sharing()
        self.validate_no_atomic_block()
        hooks, self.run_before_commit = self.run_before_commit, []
        try:
            with self.wrap_database_errors, self.connection.pipeline():
                finishers = [func() for _, func in hooks]
                self.connection.commit()  # queued after the hooks' statements; the pipeline syncs here
        except BaseException:
            self.rollback()
            raise
        self.errors_occurred = False
        self.run_commit_hooks_on_set_autocommit_on = True
        for finish in finishers:
            if callable(finish):
                finish()

    def savepoint_commit(self, sid: str) -> None:
        """Inside a test case's transaction the end of the code's outermost block stands for its
        COMMIT: run the hooks there (an error rolls the block's savepoint back, Atomic's handling)."""
        if self.run_before_commit and not self._own_transaction_open():
            self._run_before_commit()
        super().savepoint_commit(sid)

    def savepoint_rollback(self, sid: str) -> None:
        """Roll back to `sid` and forget the hooks registered while it was open."""
        super().savepoint_rollback(sid)
        self.run_before_commit = [(sids, func) for sids, func in self.run_before_commit if sid not in sids]

    def rollback(self) -> None:
        """Roll back and forget every hook and deferred savepoint."""
        self.run_before_commit = []
        self._forget_deferred()
        super().rollback()

    def close(self) -> None:
        """Close; a transaction left open rolls back with its hooks."""
        self.run_before_commit = []
        super().close()
