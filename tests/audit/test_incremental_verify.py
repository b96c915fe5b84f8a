"""Verification that keeps up: the fast verifier (audit.verify) gives the reference's verdict on
every fault, the sealed checkpoint (audit.verify_checkpoint) lets a run check only what is new
without missing a rewrite that reaches the checkpoint, and the scheduled task raises the metric.

Tampering is what the table owner can do: on PostgreSQL around the append-only trigger (as in
test_chain.py), on SQLite (no trigger) with plain SQL.
"""
from __future__ import annotations

import logging
import threading

import pytest
from django.db import close_old_connections, connection, connections
from prometheus_client import REGISTRY

from audit import chain, verify_reference
from audit.models import AuditChainHead, AuditEvent, AuditVerifyCheckpoint
from audit.verify import ChainStart, verify_chain
from audit.verify_checkpoint import chain_verify, checkpoint_seal
from tests.audit.test_chain import _verify, _write


def _key(pk) -> str:
    """A row id as the raw SQL of this backend compares it (SQLite stores 32 hex digits)."""
    return str(pk) if connection.vendor == "postgresql" else pk.hex


def _tamper(sql: str, params=None) -> None:
    """Change rows the way their owner can: around the append-only trigger on PostgreSQL."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute(sql, params)
            return
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only")
        cursor.execute(sql, params)
        cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only")


def _row(event: AuditEvent) -> AuditEvent:
    return AuditEvent.objects.get(pk=event.pk)


def _values(event: AuditEvent) -> dict:
    return {f.attname: getattr(event, f.attname) for f in AuditEvent._meta.concrete_fields}


# -- the fast verifier and the reference agree -----------------------------------------------------

def _clean(rows):
    return None


def _edited(rows):
    _tamper("UPDATE audit_auditevent SET message = 'nothing happened' WHERE id = %s", [_key(rows[3].pk)])


def _edited_json(rows):
    _tamper("UPDATE audit_auditevent SET masked_arguments = %s WHERE id = %s",
            ['{"order_id": "A000000000002", "amount": 30.0, "n": [2, 1e16]}', _key(rows[2].pk)])


def _rehashed(rows):
    victim = _row(rows[1])
    values = {**_values(victim), "message": "forged"}
    forged = chain.link_hash(victim.prev_hash, victim.chain_seq, chain.body_digest(values))
    _tamper("UPDATE audit_auditevent SET message = 'forged', row_hash = %s WHERE id = %s", [forged, _key(victim.pk)])


def _deleted(rows):
    _tamper("DELETE FROM audit_auditevent WHERE id = %s", [_key(rows[2].pk)])


def _newest_deleted(rows):
    _tamper("DELETE FROM audit_auditevent WHERE id = %s", [_key(rows[-1].pk)])


def _swapped(rows):
    a, b = _row(rows[1]), _row(rows[2])
    _tamper("UPDATE audit_auditevent SET chain_seq = -chain_seq WHERE id IN (%s, %s)", [_key(a.pk), _key(b.pk)])
    _tamper("UPDATE audit_auditevent SET chain_seq = %s WHERE id = %s", [b.chain_seq, _key(a.pk)])
    _tamper("UPDATE audit_auditevent SET chain_seq = %s WHERE id = %s", [a.chain_seq, _key(b.pk)])


def _inserted_around(rows):
    from core.sql.statements import insert_row

    forged = AuditEvent(tenant_id=rows[0].tenant_id, decision="APPROVED", message="forged approval")
    insert_row(AuditEvent, {f.attname: getattr(forged, f.attname) for f in AuditEvent._meta.concrete_fields
                            if f.attname not in chain.CHAIN_FIELDS and f.attname != "occurred_at"})


def _head_altered(rows):
    AuditChainHead.objects.filter(tenant_id=rows[0].tenant_id).update(hash="0" * 64)


@pytest.mark.parametrize("fault, words", [
    (_clean, ""), (_edited, "does not match its hash"), (_edited_json, "does not match its hash"),
    (_rehashed, "does not link to"), (_deleted, "missing row(s)"), (_newest_deleted, "the chain head is at"),
    (_swapped, "does not link to"), (_inserted_around, "has no chain position"), (_head_altered, "the chain head is at"),
])
def test_the_fast_verifier_names_the_same_first_fault_as_the_reference(requester, outsider, fault, words):
    # given: two tenants' chains, then one fault in acme's
    rows = _write(requester, 6)
    _write(outsider, 2)
    fault(rows)

    # when
    reference = verify_reference.verify_tenant(requester.tenant)
    fast = verify_chain(requester.tenant)

    # then
    assert (fast.ok, fast.problem, fast.head_seq, fast.head_hash) == (
        reference.ok, reference.problem, reference.head_seq, reference.head_hash)
    assert words in fast.problem
    if fast.ok:
        assert (fast.rows, fast.last_seq, fast.last_hash) == (reference.rows, reference.head_seq, reference.head_hash)
    assert verify_chain(outsider.tenant).ok


def test_the_fast_body_is_the_writers_canonical_json_for_every_kind_of_column(requester):
    # given: rows with every column type filled, empty and awkward values
    import uuid

    from audit import events

    odd = "quote \" backslash \\ tab \t newline \n nul-ish \x01 du 2028 \u2028 ünï 中文 😀"
    events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="EXECUTED",
                             tool_name="cancel_order", status="OK", duration_ms=3.0, message=odd,
                             masked_arguments={"z": 1.0, "a": [1.5, 2.0, {"y": None, "b": 1e16, "é": ""}], "s": odd},
                             conversation_id=uuid.uuid4(), run_id=uuid.uuid4(), idempotency_key="k" * 128)
    events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=None, decision="DENIED", tool_name="x",
                             status="", masked_arguments={}, duration_ms=0.1 + 0.2, message="")
    AuditEvent(tenant_id=requester.tenant_id, decision="EXECUTED", masked_arguments=[], policy_version=0,
               policy_rules=["r"], channel={"name": "mcp"}, execution={"holder": "h:1", "lease": None},
               duration_ms=1e300).save()

    # when / then: every link recomputes, and the digests are the reference's row by row
    verdict = verify_chain(requester.tenant)
    assert verdict.ok, verdict.problem
    assert verdict.rows == AuditEvent.objects.filter(tenant=requester.tenant).count() >= 3
    if connection.vendor == "postgresql":
        from audit.verify import _postgres_rows

        fast = {seq: digest for seq, _, _, _, digest in _postgres_rows(requester.tenant_id, ChainStart(), None)}
        names = [f.attname for f in AuditEvent._meta.concrete_fields]
        for row in AuditEvent.objects.filter(tenant=requester.tenant).values(*names):
            assert fast[row["chain_seq"]] == chain.body_digest(row)


def test_verification_starts_where_it_is_told(requester):
    rows = [_row(e) for e in _write(requester, 5)]

    assert verify_chain(requester.tenant, start=ChainStart(seq=rows[1].chain_seq, prev_hash=rows[1].row_hash)).rows == 3
    wrong = verify_chain(requester.tenant, start=ChainStart(seq=rows[1].chain_seq, prev_hash=rows[0].row_hash))
    assert not wrong.ok
    assert f"row chain_seq={rows[2].chain_seq} id={rows[2].pk} does not link to" in wrong.problem


# -- the checkpoint --------------------------------------------------------------------------------

def test_a_run_that_passes_seals_a_checkpoint_and_the_next_checks_only_what_is_new(requester):
    _write(requester, 4)

    first = chain_verify(tenant=requester.tenant)
    checkpoint = AuditVerifyCheckpoint.objects.get(tenant=requester.tenant)
    _write(requester, 3)
    second = chain_verify(tenant=requester.tenant)

    head = AuditChainHead.objects.get(tenant=requester.tenant)
    assert (first.ok, first.start_seq, first.rows) == (True, 0, head.seq - 3)
    assert (checkpoint.seq, checkpoint.row_hash) == (head.seq - 3, first.last_hash)
    assert checkpoint.seal == checkpoint_seal(tenant_id=requester.tenant_id, seq=checkpoint.seq,
                                              row_hash=checkpoint.row_hash, verified_at=checkpoint.verified_at)
    assert (second.ok, second.start_seq, second.rows) == (True, checkpoint.seq, 3)
    assert AuditVerifyCheckpoint.objects.get(tenant=requester.tenant).seq == head.seq
    code, out = _verify("--tenant", "acme")
    assert code == 0 and f"OK acme: 0 events after the checkpoint at chain_seq={head.seq}" in out


def test_an_edit_after_the_checkpoint_is_caught_and_the_checkpoint_stays(requester):
    _write(requester, 4)
    assert chain_verify(tenant=requester.tenant).ok
    before = AuditVerifyCheckpoint.objects.get(tenant=requester.tenant)
    victim = _row(_write(requester, 3)[1])

    _tamper("UPDATE audit_auditevent SET message = 'nothing happened' WHERE id = %s", [_key(victim.pk)])
    verdict = chain_verify(tenant=requester.tenant)

    assert not verdict.ok
    assert f"row chain_seq={victim.chain_seq} id={victim.pk} does not match its hash: the row was edited" in verdict.problem
    after = AuditVerifyCheckpoint.objects.get(tenant=requester.tenant)
    assert (after.seq, after.row_hash, after.verified_at, after.seal) == (
        before.seq, before.row_hash, before.verified_at, before.seal)
    code, out = _verify("--tenant", "acme")
    assert code == 1 and f"BROKEN acme: row chain_seq={victim.chain_seq}" in out


def test_an_edit_before_the_checkpoint_that_keeps_the_hashes_is_caught_by_full(requester):
    rows = [_row(e) for e in _write(requester, 6)]
    assert chain_verify(tenant=requester.tenant).ok
    victim = rows[2]

    _tamper("UPDATE audit_auditevent SET message = 'nothing happened' WHERE id = %s", [_key(victim.pk)])

    # the incremental run checks only after the checkpoint: by design it does not see this edit
    assert chain_verify(tenant=requester.tenant).ok
    full = chain_verify(tenant=requester.tenant, full=True)
    assert not full.ok
    assert f"row chain_seq={victim.chain_seq} id={victim.pk} does not match its hash" in full.problem
    code, out = _verify("--tenant", "acme", "--full")
    assert code == 1 and "does not match its hash" in out


def test_an_edit_of_the_checkpoint_row_itself_is_caught_by_the_incremental_run(requester):
    rows = [_row(e) for e in _write(requester, 4)]
    assert chain_verify(tenant=requester.tenant).ok
    checkpoint_row = AuditEvent.objects.get(tenant=requester.tenant,
                                            chain_seq=AuditVerifyCheckpoint.objects.get(tenant=requester.tenant).seq)
    assert checkpoint_row.pk == rows[-1].pk

    _tamper("UPDATE audit_auditevent SET message = 'nothing happened' WHERE id = %s", [_key(checkpoint_row.pk)])
    verdict = chain_verify(tenant=requester.tenant)

    assert not verdict.ok
    assert f"row chain_seq={checkpoint_row.chain_seq} id={checkpoint_row.pk} does not match its hash" in verdict.problem


def _rewrite_from(rows: list[AuditEvent], index: int, message: str) -> None:
    """The owner's full forgery: edit rows[index] and recompute every later link and the head."""
    prev = rows[index].prev_hash
    for row in rows[index:]:
        values = _values(row)
        if row.pk == rows[index].pk:
            values["message"] = message
        link = chain.link_hash(prev, row.chain_seq, chain.body_digest(values))
        _tamper("UPDATE audit_auditevent SET message = %s, prev_hash = %s, row_hash = %s WHERE id = %s",
                [values["message"], prev, link, _key(row.pk)])
        prev = link
    AuditChainHead.objects.filter(tenant_id=rows[0].tenant_id).update(hash=prev)


def test_a_chain_rewritten_through_the_checkpoint_is_caught_by_both_runs(requester):
    rows = [_row(e) for e in _write(requester, 6)]
    assert chain_verify(tenant=requester.tenant).ok
    seq = AuditVerifyCheckpoint.objects.get(tenant=requester.tenant).seq

    _rewrite_from(rows, 2, "nothing happened")

    assert verify_reference.verify_tenant(requester.tenant).ok  # link by link it holds: only the checkpoint knows
    incremental = chain_verify(tenant=requester.tenant)
    full = chain_verify(tenant=requester.tenant, full=True)
    assert not incremental.ok and f"row chain_seq={seq} id={rows[-1].pk} no longer has the hash" in incremental.problem
    assert not full.ok and f"row chain_seq={seq} no longer has the hash" in full.problem
    assert AuditVerifyCheckpoint.objects.get(tenant=requester.tenant).row_hash == rows[-1].row_hash


@pytest.mark.parametrize("forge", ["seq", "row_hash", "verified_at", "other key"])
def test_a_checkpoint_forged_without_the_key_is_refused(requester, forge):
    import datetime

    rows = [_row(e) for e in _write(requester, 6)]
    assert chain_verify(tenant=requester.tenant).ok
    checkpoint = AuditVerifyCheckpoint.objects.get(tenant=requester.tenant)
    # what a forger would do: move the checkpoint past rows they rewrote
    _rewrite_from(rows, 4, "nothing happened")
    changes = {"seq": {"seq": rows[4].chain_seq, "row_hash": _row(rows[4]).row_hash},
               "row_hash": {"row_hash": _row(rows[-1]).row_hash},
               "verified_at": {"verified_at": checkpoint.verified_at + datetime.timedelta(seconds=1)},
               "other key": {"row_hash": _row(rows[-1]).row_hash, "seal": checkpoint_seal(
                   tenant_id=requester.tenant_id, seq=checkpoint.seq, row_hash=_row(rows[-1]).row_hash,
                   verified_at=checkpoint.verified_at, secret="not our key")}}[forge]
    AuditVerifyCheckpoint.objects.filter(tenant=requester.tenant).update(**changes)

    verdict = chain_verify(tenant=requester.tenant)

    assert not verdict.ok
    assert "does not carry a valid seal: it was forged or altered by someone without the key" in verdict.problem
    code, out = _verify("--tenant", "acme")
    assert code == 1 and "run audit_verify --full" in out


def test_a_limited_run_advances_to_the_last_row_it_verified(requester):
    _write(requester, 5)
    head = AuditChainHead.objects.get(tenant=requester.tenant)

    first = chain_verify(tenant=requester.tenant, limit=2)
    second = chain_verify(tenant=requester.tenant, limit=100)

    assert (first.ok, first.complete, first.last_seq) == (True, False, 2)
    assert (second.ok, second.complete, second.start_seq, second.last_seq) == (True, True, 2, head.seq)


# -- the scheduled task and its metric -------------------------------------------------------------

def _gauge(name: str, tenant) -> float | None:
    return REGISTRY.get_sample_value(name, {"tenant": str(tenant.pk)})


def test_the_task_raises_the_metric_on_a_break_and_clears_it_once_the_chain_holds_again(requester, outsider, caplog):
    from audit.tasks import verify_chains

    rows = [_row(e) for e in _write(requester, 3)]
    _write(outsider, 1)
    assert verify_chains() == 0
    assert _gauge("agentplatform_audit_chain_broken", requester.tenant) == 0
    verified = _gauge("agentplatform_audit_verified_seq", requester.tenant)
    later = [_row(e) for e in _write(requester, 2)]

    # a break after the checkpoint: the metric goes up and an ERROR names the tenant and the row
    _tamper("UPDATE audit_auditevent SET message = 'nothing happened' WHERE id = %s", [_key(later[0].pk)])
    with caplog.at_level(logging.ERROR, logger="audit.verify_checkpoint"):
        assert verify_chains() == 1
    assert _gauge("agentplatform_audit_chain_broken", requester.tenant) == 1
    assert _gauge("agentplatform_audit_chain_broken", outsider.tenant) == 0
    assert _gauge("agentplatform_audit_verified_seq", requester.tenant) == verified == rows[-1].chain_seq
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("audit chain of tenant acme is BROKEN" in m and f"chain_seq={later[0].chain_seq}" in m for m in errors)

    # it stays up while the chain is broken (the checkpoint did not move), and clears once restored
    assert verify_chains() == 1 and _gauge("agentplatform_audit_chain_broken", requester.tenant) == 1
    _tamper("UPDATE audit_auditevent SET message = %s WHERE id = %s", [later[0].message, _key(later[0].pk)])
    assert verify_chains() == 0
    assert _gauge("agentplatform_audit_chain_broken", requester.tenant) == 0
    assert _gauge("agentplatform_audit_verified_seq", requester.tenant) == later[-1].chain_seq


def test_the_task_is_scheduled():
    from django.conf import settings

    assert any(entry["task"] == "audit.verify_chains" for entry in settings.CELERY_BEAT_SCHEDULE.values())


@pytest.mark.postgres
def test_rows_appended_while_a_run_reads_are_not_a_break(transactional_db, requester):
    # given: a writer appending to the tenant's chain in another connection the whole time
    _write(requester, 50)
    stop, written = threading.Event(), []

    def writer() -> None:
        close_old_connections()
        try:
            while not stop.is_set():
                written.extend(_write(requester, 1, prefix="meanwhile"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        # when: runs read while rows keep arriving
        verdicts = [chain_verify(tenant=requester.tenant) for _ in range(10)]
    finally:
        stop.set()
        thread.join()

    # then: every run passed, each from the snapshot it read, and a last one reaches the end
    assert written and all(v.ok for v in verdicts), [v.problem for v in verdicts if not v.ok]
    final = chain_verify(tenant=requester.tenant)
    assert final.ok and final.last_seq == AuditChainHead.objects.get(tenant=requester.tenant).seq
