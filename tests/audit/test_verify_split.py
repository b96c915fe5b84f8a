"""A full verification split among processes (audit.verify_parallel) gives the single run's verdict,
field for field, on a clean chain and on every kind of fault, wherever it falls: inside a range, on
the row two ranges meet at, in two ranges at once (the earlier is named), at the newest row and at
the head; and with a limit. The workers are real processes reading the parent's exported snapshot,
so the rows are committed (a transactional test) and rows written after the run began are not seen.
"""
from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from audit import verify_parallel
from audit.models import AuditChainHead, AuditEvent
from audit.verify import verify_chain
from audit.verify_parallel import verify_chain_split
from tests.audit.test_chain import _write
from tests.audit.test_incremental_verify import _tamper

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROWS = 12  # written after the seeds' rows; ranges of at least 4 rows (MIN_ROWS_PER_WORKER below)


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    monkeypatch.setattr(verify_parallel, "MIN_ROWS_PER_WORKER", 4)


def _seq(tenant_id, seq: int) -> AuditEvent:
    return AuditEvent.objects.get(tenant_id=tenant_id, chain_seq=seq)


def _edit(tenant_id, *seqs: int) -> None:
    for seq in seqs:
        _tamper("UPDATE audit_auditevent SET message = 'nothing happened' WHERE id = %s", [str(_seq(tenant_id, seq).pk)])


def _delete(tenant_id, seq: int) -> None:
    _tamper("DELETE FROM audit_auditevent WHERE id = %s", [str(_seq(tenant_id, seq).pk)])


def _relinked(tenant_id, seq: int) -> None:
    _tamper("UPDATE audit_auditevent SET prev_hash = %s WHERE id = %s", ["0" * 64, str(_seq(tenant_id, seq).pk)])


def _meets(tenant_id) -> tuple[int, int]:
    """The positions where the three ranges of a 3-process run meet (each the last of its range)."""
    head = AuditChainHead.objects.get(tenant_id=tenant_id).seq
    [_, (b1, _), (b2, _)] = verify_parallel._ranges(0, head, 3)
    return b1, b2


FAULTS = {
    "clean": lambda t, b1, b2: None,
    "edited inside a range": lambda t, b1, b2: _edit(t, b1 + 3),
    "edited where two ranges meet": lambda t, b1, b2: _edit(t, b1),
    "edited first row of a range": lambda t, b1, b2: _edit(t, b1 + 1),
    "edited in two ranges": lambda t, b1, b2: _edit(t, b2 + 2, 3),
    "deleted where two ranges meet": lambda t, b1, b2: _delete(t, b1),
    "deleted first row of a range": lambda t, b1, b2: _delete(t, b2 + 1),
    "relinked first row of a range": lambda t, b1, b2: _relinked(t, b1 + 1),
    "newest deleted": lambda t, b1, b2: _delete(t, AuditChainHead.objects.get(tenant_id=t).seq),
    "head altered": lambda t, b1, b2: AuditChainHead.objects.filter(tenant_id=t).update(hash="0" * 64),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_split_run_gives_the_single_runs_verdict(requester, outsider, fault):
    # given: a chain of three ranges (the seeds' rows and 12 more; another tenant's beside it),
    # then one kind of fault
    _write(requester, ROWS)
    _write(outsider, 3)
    b1, b2 = _meets(requester.tenant_id)
    assert b1 >= 4 and b2 - b1 >= 4
    FAULTS[fault](requester.tenant_id, b1, b2)

    # when
    single = verify_chain(requester.tenant)
    split = verify_chain_split(requester.tenant, workers=3)

    # then: the same verdict, field for field
    assert split == single
    assert split.ok == (fault == "clean")
    if fault == "edited in two ranges":
        assert "chain_seq=3 " in split.problem  # the earlier fault, not the later range's


@pytest.mark.parametrize("limit", [6, 8, 11])
def test_a_split_run_with_a_limit_stops_where_the_single_run_does(requester, limit):
    _write(requester, ROWS)
    single = verify_chain(requester.tenant, limit=limit)
    split = verify_chain_split(requester.tenant, limit=limit, workers=2)
    assert split == single
    assert split.rows == limit and not split.complete


def test_rows_written_after_the_run_began_are_not_seen(requester, monkeypatch):
    # given: the run's snapshot is taken, then rows are appended before the workers read
    _write(requester, ROWS)
    before = verify_chain(requester.tenant).rows
    original = verify_parallel._ranges

    def ranges_then_append(*args):
        _write_elsewhere(requester)
        return original(*args)

    monkeypatch.setattr(verify_parallel, "_ranges", ranges_then_append)

    # when
    verdict = verify_chain_split(requester.tenant, workers=3)

    # then: the run checked the rows of its snapshot, against that snapshot's head
    assert verdict.ok and verdict.rows == before and verdict.head_seq == before
    assert verify_chain(requester.tenant).rows == before + 2


def _write_elsewhere(user) -> None:
    """Two rows committed from another connection while the parent's snapshot stays open."""
    import threading

    def write():
        try:
            _write(user, 2, prefix="later")
        finally:
            connection.close()

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()


def test_the_command_splits_a_full_run(requester, capsys):
    _write(requester, ROWS)
    call_command("audit_verify", "--tenant", requester.tenant.slug, "--full", "--workers", "3")
    out = capsys.readouterr().out
    assert f"OK {requester.tenant.slug}: {verify_chain(requester.tenant).rows} events" in out
