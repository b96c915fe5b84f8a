"""core.sql.statements.insert_row / update_row: the single-statement writes of the hot path store what
the ORM would store (defaults, auto_now, JSON, UUIDs) and skip a unique conflict without an error."""
from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, transaction

from core.sql.statements import insert_row, update_row
from audit.models import AuditEvent
from tools.models import IdempotencyRecord


def _claim(tenant_id: int, key: str, **extra):
    values = {"tenant_id": tenant_id, "key": key, "tool_name": "t", "arguments_hash": "h" * 64,
              "locked_at": "2026-01-01T00:00:00+00:00", **extra}
    return insert_row(IdempotencyRecord, values, conflict_fields=("tenant", "key"), returning="id")


def test_insert_row_fills_defaults_and_returns_the_key(db, requester):
    record_id = _claim(requester.tenant_id, "k1")

    record = IdempotencyRecord.objects.get(pk=record_id)
    assert record.status == IdempotencyRecord.Status.PROCESSING  # the field's default
    assert record.result is None and record.business_result_id == ""
    assert record.created_at is not None and record.updated_at is not None  # auto_now(_add)


def test_insert_row_skips_a_unique_conflict_and_the_transaction_goes_on(db, requester):
    first = _claim(requester.tenant_id, "k1")

    with transaction.atomic():
        again = _claim(requester.tenant_id, "k1", tool_name="other")
        later = _claim(requester.tenant_id, "k2")  # the transaction is not aborted

    assert first is not None and again is None and later is not None
    assert IdempotencyRecord.objects.get(pk=first).tool_name == "t"
    assert IdempotencyRecord.objects.count() == 2


def test_insert_row_raises_for_other_constraints(db, requester):
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_row(IdempotencyRecord, {"tenant_id": requester.tenant_id, "key": "k", "tool_name": "t",
                                       "arguments_hash": "h", "locked_at": None})  # NOT NULL


def test_update_row_changes_only_the_given_fields(db, requester):
    record_id = _claim(requester.tenant_id, "k1")

    changed = update_row(IdempotencyRecord, record_id, {"status": "SUCCEEDED", "result": {"success": True, "n": [1]}})
    missing = update_row(IdempotencyRecord, record_id + 1000, {"status": "FAILED"})

    record = IdempotencyRecord.objects.get(pk=record_id)
    assert (changed, missing) == (1, 0)
    assert record.status == "SUCCEEDED" and record.result == {"success": True, "n": [1]} and record.tool_name == "t"


def test_insert_row_stores_uuid_json_and_null_like_the_orm(db, requester):
    conversation_id = uuid.uuid4()
    insert_row(AuditEvent, {"id": uuid.uuid4(), "tenant_id": requester.tenant_id, "decision": "EXECUTED",
                            "conversation_id": conversation_id, "masked_arguments": {"phone": "138****0000"}})

    event = AuditEvent.objects.get(conversation_id=conversation_id)
    assert event.masked_arguments == {"phone": "138****0000"} and event.confirmation_id is None
    assert event.occurred_at is not None and event.message == ""


def test_track_writes_sees_writes_and_forgets_those_a_savepoint_rolled_back(db, requester):
    from core.sql.transactions import track_writes

    with track_writes() as reads:
        list(IdempotencyRecord.objects.select_for_update().filter(tenant_id=requester.tenant_id))
    with track_writes() as undone, transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():  # a savepoint, rolled back
            _claim(requester.tenant_id, "undone")
            raise RuntimeError("refused")
    with track_writes() as kept, transaction.atomic():
        with transaction.atomic():  # a savepoint, released
            _claim(requester.tenant_id, "kept")

    assert (reads.wrote, undone.wrote, kept.wrote) == (False, False, True)
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["kept"]
