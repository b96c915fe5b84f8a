"""Work that runs inside a transaction as its last statement, right before its COMMIT
(`before_commit`).

Why: a row lock taken by a write is held until the transaction ends. A write that serialises many
transactions on one row (a tenant's audit-chain head, audit.chain) holds everyone else back for the
rest of its transaction when it is sent in the middle of it; sent right before the COMMIT, it holds
them back for that statement and the COMMIT only. What it writes still commits, or rolls back,
with the transaction: unlike `transaction.on_commit`, which runs after the COMMIT, outside it.

The connection keeps the hooks when its backend offers `before_commit` (agentplatform.pgbackend
does); with any other backend (SQLite, whose transactions hold the whole database's write lock
from their first statement anyway, or Django's own PostgreSQL backend under
DB_RELEASE_SAVEPOINTS=true) the work runs at once, as it did before.
"""
from __future__ import annotations

from typing import Callable

from django.db import DEFAULT_DB_ALIAS, connections


def before_commit(func: Callable[[], Callable[[], None] | None], *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Run `func()` as the last work of the current transaction, right before its COMMIT; or now.

    Deferred when the connection's backend keeps such hooks and an atomic block of the code's own
    is open (a test case's enclosing transaction does not count: its end is a rollback, so the
    hooks then run when the outermost block of the code's own ends). A deferred `func`:
    - runs inside the transaction, after every other statement of it, in the order registered;
    - is forgotten when the savepoint that was open when it was registered rolls back, or the
      transaction rolls back (as `transaction.on_commit` callbacks are);
    - fails the commit when it raises: the transaction rolls back and the error propagates from
      the atomic block's exit (fail closed).
    Outside a transaction (autocommit), or with a backend without hooks, `func()` runs at once.
    `func` sends its statements and may return a callable that reads their results: the backend
    may send the COMMIT with them in one round trip and call it afterwards (it is called at once
    when `func` ran at once). Returns True when deferred, False when it ran. Raises what `func` (or
    what it returned) raises when it ran at once.
    """
    register = getattr(connections[using], "before_commit", None)
    if register is not None and register(func):
        return True
    finish = func()
    if callable(finish):
        finish()
    return False
