"""Execute a side effect at most once per (tenant, idempotency key).

The claim is an INSERT that loses a race cleanly on the unique constraint; for local business
changes the record and the change commit in one transaction, so "SUCCEEDED" implies the change
happened and a crash leaves neither behind.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable

from django.conf import settings
from core import clock
from django.db import transaction

from core.sql.select import select_rows
from core.sql.statements import insert_row, update_row
from core.sql.transactions import track_writes
from tools.errors import ToolBusinessError
from tools.models import IdempotencyRecord
from tools.results import ToolResult

Status = IdempotencyRecord.Status


@dataclass(frozen=True)
class Outcome:
    """kind: EXECUTED | IDEMPOTENT_HIT | CONFLICT | IN_PROGRESS | OUTCOME_UNKNOWN. result: for the model."""

    kind: str
    result: ToolResult
    business_result_id: str = ""


def _from_record(record: IdempotencyRecord, arguments_hash: str) -> Outcome:
    if record.arguments_hash != arguments_hash:
        return Outcome("CONFLICT", ToolResult.failure(
            "IDEMPOTENCY_CONFLICT", "this action was already requested with other arguments"))
    if record.status == Status.PROCESSING:
        return Outcome("IN_PROGRESS", ToolResult.failure(
            "IN_PROGRESS", "the same action is still being executed", retryable=True, terminal=False))
    if record.status == Status.OUTCOME_UNKNOWN:
        return Outcome("OUTCOME_UNKNOWN", ToolResult.failure(
            "OUTCOME_UNKNOWN", "an earlier attempt was interrupted; an administrator must check it"))
    return Outcome("IDEMPOTENT_HIT", ToolResult.from_dict(record.result), record.business_result_id)


def idempotency_peek(*, tenant_id: int, key: str, arguments_hash: str) -> Outcome | None:
    """Return the outcome an existing record dictates, or None when the key was never claimed.

    Used before minting a confirmation: repeating a finished action must not cost a human's attention.
    """
    # A prebuilt statement (core.sql.select.select_rows): before every gated keyed call.
    found = select_rows(IdempotencyRecord, {"tenant_id": tenant_id, "key": key}, limit=1)
    return _from_record(found[0], arguments_hash) if found else None


class ReadOnlyViolation(RuntimeError):
    """A tool declared `read_only` sent a statement that may change rows. The call fails and its
    transaction rolls back (fail closed): the declaration is what let it run without a savepoint."""


def run_action(action: Callable[[], tuple[ToolResult, str]], *, read_only: bool) -> tuple[ToolResult, str, bool]:
    """Run `action()` inside the caller's transaction; return (result, business_result_id, succeeded).

    A ToolBusinessError becomes a failure result, stored by the caller in the same transaction as
    the consumption and the claim, so however many callers race, the tool runs once. What the tool
    wrote before refusing is undone by a savepoint around it. A `read_only` tool has nothing to undo
    and runs without one (two round trips saved, the most frequent calls); its statements are watched
    (`track_writes`), and one that may change rows raises ReadOnlyViolation, whether or not the tool
    went on to succeed. Other exceptions propagate.
    """
    if not read_only:
        try:
            with transaction.atomic():
                result, business_id = action()
        except ToolBusinessError as error:
            return ToolResult.failure(error.code, error.message), "", False
        return result, business_id, True
    succeeded = True
    with track_writes() as writes:
        try:
            result, business_id = action()
        except ToolBusinessError as error:
            result, business_id, succeeded = ToolResult.failure(error.code, error.message), "", False
    if writes.wrote:
        raise ReadOnlyViolation("a tool declared read_only sent a statement that may change rows")
    return result, business_id, succeeded


def idempotency_execute(
    *,
    tenant_id: int,
    key: str,
    tool_name: str,
    arguments_hash: str,
    action: Callable[[], tuple[ToolResult, str]],
    read_only: bool = False,
) -> Outcome:
    """Claim `key` and run `action` once; must be called inside the caller's transaction.

    action() -> (ToolResult, business_result_id), run by `run_action` (read_only: see there); a
    ToolBusinessError is stored as a FAILED result and replayed like a success. Any other exception
    propagates and rolls the claim back with the caller's transaction.
    Returns Outcome(EXECUTED | IDEMPOTENT_HIT | CONFLICT | IN_PROGRESS | OUTCOME_UNKNOWN).

    A `read_only` action has no side effect to guard, so it is not claimed first: it runs, and its
    finished record is stored in one INSERT (one statement instead of two); a key already
    recorded answers from that record as above (the read that ran meanwhile changed nothing).
    """
    if read_only:
        result, business_id, succeeded = run_action(action, read_only=True)
        stored = insert_row(IdempotencyRecord, {
            "tenant_id": tenant_id, "key": key, "tool_name": tool_name, "arguments_hash": arguments_hash,
            "status": Status.SUCCEEDED if succeeded else Status.FAILED, "locked_at": clock.now(),
            "result": result.to_dict(), "business_result_id": business_id,
        }, conflict_fields=("tenant", "key"))
        if stored is None:
            return _from_record(IdempotencyRecord.objects.get(tenant_id=tenant_id, key=key), arguments_hash)
        return Outcome("EXECUTED", result, business_id)
    record_id = insert_row(IdempotencyRecord, {
        "tenant_id": tenant_id, "key": key, "tool_name": tool_name, "arguments_hash": arguments_hash,
        "status": Status.PROCESSING, "locked_at": clock.now(), "business_result_id": "",
    }, conflict_fields=("tenant", "key"), returning="id")
    if record_id is None:
        # Lost the race (or a replay). On PostgreSQL `ON CONFLICT DO NOTHING` waited for the
        # winner's commit (a winner that rolled back lets this INSERT through instead), and this
        # read runs on a new READ COMMITTED snapshot, so it sees the winner's row.
        return _from_record(IdempotencyRecord.objects.get(tenant_id=tenant_id, key=key), arguments_hash)
    result, business_id, succeeded = run_action(action, read_only=read_only)
    # A remote call that may have run without an answer stays OUTCOME_UNKNOWN for an administrator.
    status = Status.OUTCOME_UNKNOWN if result.code == "OUTCOME_UNKNOWN" else \
        Status.SUCCEEDED if succeeded and result.success else Status.FAILED
    update_row(IdempotencyRecord, record_id, {"status": status, "result": result.to_dict(),
                                              "business_result_id": business_id, "updated_at": clock.now()})
    return Outcome("EXECUTED", result, business_id)


def idempotency_prune(*, older_than_hours: int | None = None) -> int:
    """Delete finished records older than the retention (at least 72 hours). Returns the count.

    PROCESSING and OUTCOME_UNKNOWN records are kept for recovery and admin review.
    """
    hours = max(72, older_than_hours or settings.TOOLS_IDEMPOTENCY_RETENTION_HOURS)
    cutoff = clock.now() - datetime.timedelta(hours=hours)
    deleted, _ = IdempotencyRecord.objects.filter(
        created_at__lt=cutoff, status__in=[Status.SUCCEEDED, Status.FAILED]
    ).delete()
    return deleted
