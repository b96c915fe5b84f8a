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
"""
from __future__ import annotations

from typing import Callable

from django.db.backends.postgresql import base

Hook = Callable[[], Callable[[], None] | None]


class DatabaseWrapper(base.DatabaseWrapper):
    """`django.db.backends.postgresql`'s wrapper; a successful savepoint is left to its transaction,
    and `before_commit` hooks run right before the COMMIT."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # (savepoint ids open at registration, hook), in the order registered. A hook sends its
        # statements and may return a callable that reads their results after the COMMIT.
        self.run_before_commit: list[tuple[set[str], Hook]] = []

    def _savepoint_commit(self, sid: str) -> None:
        """Do not send RELEASE SAVEPOINT `sid`: the transaction's end releases it (module docstring)."""
        return None

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
        """Roll back and forget every hook."""
        self.run_before_commit = []
        super().rollback()

    def close(self) -> None:
        """Close; a transaction left open rolls back with its hooks."""
        self.run_before_commit = []
        super().close()
