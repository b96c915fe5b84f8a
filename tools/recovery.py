"""Recovery of idempotency claims whose outcome nobody knows: a PROCESSING record older than its
lease is recoverable.

A record stays PROCESSING after its transaction committed only when the side effect lives outside
our database (the claim must commit before the remote call): if the caller then died, the remote
change may or may not have happened. Re-running could do it twice, so the record becomes
OUTCOME_UNKNOWN: replays answer OUTCOME_UNKNOWN to the model (tools.idempotency), an audit event
RECOVERED says so, and an administrator decides (admin: idempotency records, filter by status).
"""
from __future__ import annotations

import datetime

from django.conf import settings
from django.db import transaction

from core import clock
from audit import events
from tools.models import IdempotencyRecord
from tools.results import ToolResult

Status = IdempotencyRecord.Status

UNKNOWN_MESSAGE = ("an earlier attempt was interrupted after it started; whether the action happened is unknown "
                   "and an administrator must check it")


@transaction.atomic(durable=True)
def idempotency_record_mark_unknown(*, record_id: int, now: datetime.datetime) -> bool:
    """Mark one record OUTCOME_UNKNOWN if it is still PROCESSING past its lease (compare-and-set),
    with its audit event RECOVERED in the same transaction. Returns True when this call changed it."""
    cutoff = now - datetime.timedelta(seconds=settings.TOOLS_IDEMPOTENCY_LEASE_SECONDS)
    record = IdempotencyRecord.objects.filter(pk=record_id).first()
    if record is None:
        return False
    changed = IdempotencyRecord.objects.filter(pk=record_id, status=Status.PROCESSING, locked_at__lt=cutoff).update(
        status=Status.OUTCOME_UNKNOWN, result=ToolResult.failure("OUTCOME_UNKNOWN", UNKNOWN_MESSAGE).to_dict(),
        updated_at=now)
    if changed != 1:
        return False
    events.idempotency_record_recovered(tenant_id=record.tenant_id, tool_name=record.tool_name,
                  status=Status.OUTCOME_UNKNOWN, arguments_hash=record.arguments_hash,
                  idempotency_key=record.key, message=f"claimed at {record.locked_at.isoformat()}; {UNKNOWN_MESSAGE}")
    return True


def idempotency_records_recover(*, now: datetime.datetime | None = None, limit: int = 500) -> list[int]:
    """Mark every record PROCESSING for longer than TOOLS_IDEMPOTENCY_LEASE_SECONDS as
    OUTCOME_UNKNOWN (at most `limit` per call, oldest first). Returns the ids this call changed;
    a record changed concurrently by another sweeper is not returned twice."""
    now = now or clock.now()
    cutoff = now - datetime.timedelta(seconds=settings.TOOLS_IDEMPOTENCY_LEASE_SECONDS)
    candidates = IdempotencyRecord.objects.filter(status=Status.PROCESSING, locked_at__lt=cutoff)
    ids = list(candidates.order_by("locked_at").values_list("pk", flat=True)[:limit])
    return [pk for pk in ids if idempotency_record_mark_unknown(record_id=pk, now=now)]
