"""The per-tenant retention lock: one retention run per tenant at a time, whatever the number of
workers, beat schedulers or operators at a shell."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

# The first key of the two-key advisory lock: "RET1" in ASCII, so it meets no other lock's class.
LOCK_CLASS = 0x52455431


@contextmanager
def tenant_retention_lock(tenant_id: int) -> Iterator[bool]:
    """Try to take the tenant's retention lock for the block; yields whether it was taken (False:
    another run holds it; do nothing).

    On PostgreSQL a session-level advisory lock (`pg_try_advisory_lock(LOCK_CLASS, tenant_id)`):
    it spans the run's many short transactions, never waits, and is released at the end of the
    block or when the session ends (a killed worker holds nothing). On SQLite, which serialises
    writers anyway, always True (single-process deployments only).
    """
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, tenant_id])
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, tenant_id])
