"""Leases and fences of a run: how a process proves it still holds the run it writes.

A process that drives a run holds it while the run's row is RUNNING with the lease this process
set (`lease_expires_at`). Every write of the run is fenced by that lease: a compare-and-set that
matches only while the row still carries it, so a holder that lost the run to recovery (or whose
run was cancelled) raises RunClaimLost instead of overwriting the new holder's state.

These functions run inside the caller's transaction when it has one; `run_save_fenced` is a
single UPDATE that commits on its own outside one.
"""
from __future__ import annotations

import datetime

from django.conf import settings

from core import clock
from core.sql.select import select_rows
from core.sql.statements import update_row
from agentplatform.runtime.models import Run
from tools.context import FenceLost


class RunClaimLost(FenceLost):
    """This process no longer holds the run: its lease expired and another worker recovered it,
    or the run was cancelled.

    Raised by a fenced write instead of overwriting the new holder's state, and by the fence the
    pipeline checks inside the transaction that would execute a tool; the caller stops.
    `run_id`: the run that was lost.
    """

    def __init__(self, message: str, *, run_id=None) -> None:
        super().__init__(message)
        self.run_id = run_id


def new_lease() -> datetime.datetime:
    """The expiry of a lease taken or renewed now: AGENT_RUN_LEASE_SECONDS from now (UTC)."""
    return clock.now() + datetime.timedelta(seconds=settings.AGENT_RUN_LEASE_SECONDS)


def lock_held(run: Run, lease: datetime.datetime | None, consequence: str) -> datetime.datetime | None:
    """Lock the run's row (FOR NO KEY UPDATE) while it is RUNNING with `lease`, the lease the row
    holds for this process; raises RunClaimLost (its message ends with `consequence`) otherwise,
    returns `lease`.

    FOR NO KEY UPDATE is the lock an UPDATE of the row would take, without writing a new row
    version; it is held until the caller's transaction ends, so a recovery's claim waits for it.
    Nothing is written here, so a savepoint around the caller that rolls back leaves the caller's
    held writes as they were.
    """
    held = select_rows(Run, {"id": run.pk, "status": Run.Status.RUNNING, "lease_expires_at": lease},
                       for_update="no key", only=("id",))
    if len(held) != 1:
        raise RunClaimLost(f"run {run.pk} is no longer held by this process; {consequence}", run_id=run.pk)
    return lease


def run_save_fenced(run: Run, values: dict, *, held: datetime.datetime | None) -> None:
    """Write `values` (column -> value, the new lease and updated_at among them) to the run's row
    in one UPDATE that matches only while the row is RUNNING with the lease `held`. Raises
    RunClaimLost when it matches nothing (this process no longer holds the run)."""
    changed = update_row(Run, run.pk, values, where={"status": Run.Status.RUNNING, "lease_expires_at": held})
    if changed != 1:
        raise RunClaimLost(f"run {run.pk} is no longer held by this process", run_id=run.pk)
