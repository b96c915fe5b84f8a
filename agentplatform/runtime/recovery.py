"""Finding work that a crash, a lost message or an outage left behind.

What can be left behind, and what happens to it:

- an IdempotencyRecord stuck in PROCESSING past TOOLS_IDEMPOTENCY_LEASE_SECONDS: nobody knows
  whether its side effect happened, so it is marked OUTCOME_UNKNOWN, audited as RECOVERED and
  left for an administrator (admin: idempotency records, filter by status); never re-run
  automatically (`tools.recovery`);
- a Run RUNNING past `lease_expires_at`: its holder died. `claims.run_recover` re-claims it with a
  compare-and-set and continues from its recorded state (confirmation consume + idempotency make
  sure nothing runs twice), or fails it with RUN_LEASE_EXPIRED;
- a Run parked after a model outage (RUNNING, no lease) for longer than a lease: its retry
  message was lost; `claims.run_resume` continues it;
- a Run AWAITING_CONFIRMATION whose every request was decided more than RESUME_GRACE_SECONDS ago:
  the resume message enqueued on commit was lost (broker down at that moment); `run_resume`.

Local business changes commit with their idempotency record and their confirmation's consume in
one transaction (tools/idempotency.py), so a worker killed mid-execution leaves nothing half done:
the confirmation is still CONFIRMED, the run RUNNING with an expired lease, and recovery executes
the call exactly once.
"""
from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from core import clock
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from tools.recovery import idempotency_records_recover

# A decision's own resume normally starts within milliseconds; only after this long is a waiting
# run with every decision made treated as having lost its resume message.
RESUME_GRACE_SECONDS = 60


@dataclass(frozen=True)
class StuckWork:
    """What one sweep found. idempotency_record_ids: marked OUTCOME_UNKNOWN by this sweep.
    run_ids: runs to hand to `resume_run` (which claims each with a compare-and-set)."""

    idempotency_record_ids: list[int]
    run_ids: list[uuid.UUID]


def runs_needing_push(*, now: datetime.datetime | None = None, limit: int = 200) -> list[uuid.UUID]:
    """Ids of runs that nobody is driving although they could move (see the module docstring),
    oldest first, at most `limit`. A read: the claim happens in the resume task."""
    now = now or clock.now()
    lease = datetime.timedelta(seconds=settings.AGENT_RUN_LEASE_SECONDS)
    still_open = ConfirmationRequest.objects.open(now=now).filter(run_id=OuterRef("pk"))
    decided_recently = ConfirmationRequest.objects.filter(
        run_id=OuterRef("pk"), decided_at__gt=now - datetime.timedelta(seconds=RESUME_GRACE_SECONDS))
    stuck = Run.objects.filter(
        Q(status=Run.Status.RUNNING, lease_expires_at__lt=now)
        | Q(status=Run.Status.RUNNING, lease_expires_at__isnull=True, updated_at__lt=now - lease)
        | Q(Q(status=Run.Status.AWAITING_CONFIRMATION) & ~Exists(still_open) & ~Exists(decided_recently)
            & Q(updated_at__lt=now - datetime.timedelta(seconds=RESUME_GRACE_SECONDS)))
    )
    return list(stuck.order_by("updated_at").values_list("pk", flat=True)[:limit])


def stuck_work_recover(*, now: datetime.datetime | None = None) -> StuckWork:
    """One recovery sweep: mark stuck idempotency records OUTCOME_UNKNOWN (each in its own
    transaction, audited RECOVERED) and list the runs to push. Idempotent."""
    return StuckWork(idempotency_record_ids=idempotency_records_recover(now=now),
                     run_ids=runs_needing_push(now=now))
