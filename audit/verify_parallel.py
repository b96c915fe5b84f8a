"""A full verification of one long chain split across processes, in one snapshot.

`audit.verify.verify_chain` reads and hashes a tenant's rows in one process: about 37,000 rows/s
at 100,000 rows on a 2-core machine, most of it Python (decoding JSON columns, building the
canonical text, two SHA-256 per row). The links of a hash chain can be checked in any order once
each piece knows the hash its first row must link to, so a long run is cut into consecutive
ranges of chain positions, each checked by its own process:

- the parent opens a REPEATABLE READ, READ ONLY transaction and exports its snapshot
  (`pg_export_snapshot`); every worker imports it (`SET TRANSACTION SNAPSHOT`), so all of them read
  exactly the rows and head the parent sees, whatever is appended meanwhile;
- the parent reads, in that snapshot, the stored `row_hash` of the position before each range;
  a worker checks its range from there with `verify_chain`'s own code (same faults, same words).
  The stored hash a range starts from is itself checked (content and link) by the range before
  it, so the ranges together check every link the single run checks;
- the verdicts are joined in chain order: the first range with a fault names the chain's first
  fault (a later range's fault is never reported before an earlier one's), rows add up, the last
  range compares the head.

Processes, not threads: the work is Python holding the GIL. They are started with "spawn" (a
fresh interpreter: a forked child would share the parent's database socket), which costs about a
second each, so ranges are only split when each gets at least `MIN_ROWS_PER_WORKER` rows; a
shorter run, SQLite, a caller inside a transaction and `workers=1` take `verify_chain` as it is.
Not for a Celery prefork worker (its processes are daemonic and cannot start children): the
scheduled incremental run stays in one process; `manage.py audit_verify --full --workers N` and
bench/audit_verify.py use this.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

from django.apps import apps
from django.db import connection, transaction

from audit.verify import FROM_THE_FIRST_ROW, ChainStart, ChainVerdict, verify_chain

MIN_ROWS_PER_WORKER = 100_000
_SNAPSHOT_ID = re.compile(r"^[0-9A-F]+-[0-9A-F]+(-[0-9]+)?$")


class _Tenant(NamedTuple):
    """What the verifier needs of a tenant, sent to a worker process."""

    pk: int
    slug: str


def verify_chain_split(tenant, *, start: ChainStart = FROM_THE_FIRST_ROW, limit: int | None = None,
                       workers: int = 1) -> ChainVerdict:
    """`verify_chain(tenant, start=start, limit=limit)`, its rows split among `workers` processes
    when that pays (see the module's docstring); the same ChainVerdict, the same faults.

    tenant: a Tenant (pk, slug). workers: processes to use (1 or less: this one). Raises
    DatabaseError when the database cannot be read; a worker's error is raised here.
    """
    if workers <= 1 or connection.vendor != "postgresql" or connection.in_atomic_block:
        return verify_chain(tenant, start=start, limit=limit)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute("SELECT pg_export_snapshot()")
            [snapshot] = cursor.fetchone()
        head = (apps.get_model("audit", "AuditChainHead").objects.filter(tenant_id=tenant.pk)
                .values_list("seq", flat=True).first() or 0)
        end = head if limit is None else min(head, start.seq + limit)
        ranges = _ranges(start.seq, end, workers)
        if len(ranges) < 2:
            return verify_chain(tenant, start=start, limit=limit)  # in this snapshot: the caller's block
        stored = dict(apps.get_model("audit", "AuditEvent").objects.filter(
            tenant_id=tenant.pk, chain_seq__in=[low for low, _ in ranges[1:]]).values_list("chain_seq", "row_hash"))
        jobs = []  # (start point, rows): the last range runs to the end (or the caller's limit) and the head
        for index, (low, high) in enumerate(ranges):
            # a missing row there: "" links to nothing, and the range before it reports the gap first
            first = start if index == 0 else ChainStart(seq=low, prev_hash=stored.get(low, ""))
            if index < len(ranges) - 1:
                jobs.append((first, high - low))
            else:
                jobs.append((first, None if limit is None else start.seq + limit - low))
        database = dict(connection.settings_dict)
        with ProcessPoolExecutor(max_workers=len(jobs), mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_setup, initargs=(database,)) as pool:
            futures = [pool.submit(_verify_range, _Tenant(tenant.pk, tenant.slug), snapshot, first, rows)
                       for first, rows in jobs]
            verdicts = [future.result() for future in futures]
    return _joined(start, verdicts)


def _ranges(after: int, end: int, workers: int) -> list[tuple[int, int]]:
    """(low, high] ranges of chain positions, consecutive, covering (after, end]: as many as
    `workers`, each of at least MIN_ROWS_PER_WORKER (one when the span is shorter)."""
    span = end - after
    count = max(1, min(workers, span // MIN_ROWS_PER_WORKER))
    size = -(-span // count) if span > 0 else 0
    return [(after + i * size, min(end, after + (i + 1) * size)) for i in range(count)]


def _joined(start: ChainStart, verdicts: list[ChainVerdict]) -> ChainVerdict:
    """One verdict of consecutive ranges' verdicts: the first fault in chain order, rows added."""
    rows = 0
    for verdict in verdicts:
        rows += verdict.rows
        if not verdict.ok:
            return dataclasses.replace(verdict, rows=rows, start_seq=start.seq)
    return dataclasses.replace(verdicts[-1], rows=rows, start_seq=start.seq)


def _worker_setup(database: dict) -> None:
    """Start Django in a worker process on the parent's database (a test database included)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    import django

    django.setup()
    from django.db import connections

    connections["default"].settings_dict.update(database)


def _verify_range(tenant: _Tenant, snapshot: str, first: ChainStart, rows: int | None) -> ChainVerdict:
    """In a worker: `verify_chain` from `first`, at most `rows` rows (None: to the end and the
    head), in the parent's exported snapshot."""
    if not _SNAPSHOT_ID.match(snapshot):
        raise ValueError(f"not a snapshot id: {snapshot!r}")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
        return verify_chain(tenant, start=first, limit=rows)
