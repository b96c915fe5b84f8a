"""Archiving the oldest part of a tenant's audit trail to a file, and deleting what an archive holds
(docs/operations.md, "Retention and storage").

An archive file is a JSON Lines export (audit.export.jsonl_lines) of the tenant's rows chain_seq
`first`..`last`, where `first` is where the online chain starts (audit.chain.online_chain_start).
Beside it, FILE.manifest.json names the tenant, the range, the hash the first row links to, the
last row's hash, the row count and the file's SHA-256; `python -m audit.verify_export FILE` checks
the file against it. The file and its manifest are written to a temporary name, fsynced and renamed
before the RetentionArchive row is inserted, and rows are deleted only after that row committed:
a crash leaves at worst an unreferenced file (rewritten identically by the next run) or archived
rows still online (deleted by the next run). Nothing here opens a long transaction: each deletion
batch is its own.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from audit.chain import online_chain_start
from audit.export import jsonl_lines
from audit.models import AuditEvent, RetentionArchive

MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = "agentplatform-retention-archive/1"


def archive_alias() -> str:
    """The database alias retention writes archive records and deletes audit rows through:
    "retention" when RETENTION_DATABASE_URL configures the retention role (the application's role
    holds neither right: `manage.py grant_app_role`), else "default"."""
    return "retention" if "retention" in settings.DATABASES else "default"


class ArchiveRefused(Exception):
    """The rows to archive do not form an unbroken chain from the online start: nothing is archived
    or deleted (run `manage.py audit_verify` and look at the named row)."""


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a platform without directory descriptors
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_archive_file(path: Path, chunks: Iterable[bytes]) -> tuple[str, int]:
    """Write `chunks` to `path` durably (temporary name, fsync, rename, fsync of the directory);
    return (hex SHA-256 of the bytes, byte count). Creates the directory. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".partial")
    digest, size = hashlib.sha256(), 0
    with open(temporary, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_dir(path.parent)
    return digest.hexdigest(), size


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Write `manifest` as FILE.manifest.json beside the archive at `path`, durably. Raises OSError."""
    text = json.dumps({"format": MANIFEST_FORMAT, **manifest}, indent=2, sort_keys=True, ensure_ascii=False)
    write_archive_file(path.with_name(path.name + MANIFEST_SUFFIX), [text.encode("utf-8") + b"\n"])


def audit_archive_bounds(*, tenant_id: int, before) -> tuple[int, int, str]:
    """(first, last, prev_hash): the chain range of the tenant's online rows that occurred before
    `before` (an aware datetime) and the hash the first links to; last < first when there is none.
    Two SELECTs (the archive table; one entry of the (tenant, occurred_at) index)."""
    first, prev_hash = online_chain_start(tenant_id)
    last = newest_before(tenant_id=tenant_id, before=before, first=first).first()
    return first, (last if last is not None else first - 1), prev_hash


def newest_before(*, tenant_id: int, before, first: int):
    """The query of the cut: the chain position of the tenant's newest online row that occurred
    before `before` (a values_list queryset; `.first()` runs it).

    The cut is that row's position. occurred_at is stamped just before the position is taken, so
    rows written within the same moments may sit on either side of it: the cut is a chain
    position, exact to those moments. Ordered by occurred_at alone, so the (tenant, occurred_at)
    index answers it backwards with LIMIT 1 whatever the trail's length (a second sort key would
    sort every old row; tests/retention/test_cut_plan.py).
    """
    return (AuditEvent.objects.filter(tenant_id=tenant_id, occurred_at__lt=before, chain_seq__gte=first)
            .order_by("-occurred_at").values_list("chain_seq", flat=True))


def audit_archive_write(*, tenant_id: int, tenant_slug: str, last: int, root: Path) -> RetentionArchive | None:
    """Archive the tenant's audit rows from the online chain start to chain_seq `last` into
    `root`/<slug>/audit-<first>-<last>.jsonl with its manifest, then record the RetentionArchive.

    Returns the new record, or None when there is nothing to archive or another run recorded the
    same range first. Raises ArchiveRefused when the rows are not an unbroken chain from the start
    (a deleted, inserted or edited row: the file is removed, nothing recorded), OSError when the
    file cannot be written.
    """
    first, prev_hash = online_chain_start(tenant_id)
    if last < first:
        return None
    relative = f"{tenant_slug}/audit-{first:012d}-{last:012d}.jsonl"
    path = root / relative
    rows = AuditEvent.objects.filter(tenant_id=tenant_id, chain_seq__gte=first, chain_seq__lte=last)
    state = {"count": 0, "seq": first - 1, "hash": prev_hash}

    def checked(chunks: Iterable[bytes]) -> Iterable[bytes]:
        for chunk in chunks:
            for line in chunk.splitlines():
                row = json.loads(line)
                if row["chain_seq"] != state["seq"] + 1 or (row["prev_hash"] or "") != state["hash"]:
                    raise ArchiveRefused(f"audit row chain_seq={row['chain_seq']} id={row['id']} does not follow "
                                         f"chain_seq={state['seq']}: the online chain is broken")
                state.update(count=state["count"] + 1, seq=row["chain_seq"], hash=row["row_hash"])
            yield chunk

    try:
        sha256, _size = write_archive_file(path, checked(jsonl_lines(rows)))
    except ArchiveRefused:
        path.with_name(path.name + ".partial").unlink(missing_ok=True)
        raise
    if state["seq"] != last:
        path.unlink(missing_ok=True)
        raise ArchiveRefused(f"audit rows chain_seq={state['seq'] + 1}..{last} are missing: the online chain is broken")
    created_at = timezone.now()
    write_manifest(path, {"kind": RetentionArchive.Kind.AUDIT, "tenant": tenant_slug, "tenant_id": tenant_id,
                          "file": path.name, "first_seq": first, "last_seq": last, "prev_hash": prev_hash,
                          "last_hash": state["hash"], "rows": state["count"], "sha256": sha256,
                          "created_at": created_at.isoformat()})
    alias = archive_alias()
    try:
        with transaction.atomic(using=alias):
            return RetentionArchive.objects.using(alias).create(
                tenant_id=tenant_id, kind=RetentionArchive.Kind.AUDIT, first_seq=first, last_seq=last,
                prev_hash=prev_hash, last_hash=state["hash"], path=relative, sha256=sha256, rows=state["count"],
                created_at=created_at)
    except IntegrityError:
        return None  # another run recorded this range first; its file has the same rows


def audit_archived_prune(*, tenant_id: int, batch: int) -> int:
    """Delete up to `batch` of the tenant's audit rows that an AUDIT archive holds (chain_seq at or
    below the newest archive's last_seq), oldest first, in one short transaction; return how many.

    On PostgreSQL the transaction sets `agentplatform.retention` for the append-only trigger
    (migration 0014), which checks each row against the archive table itself. Call until it
    returns less than `batch`.
    """
    last = (RetentionArchive.objects.filter(tenant_id=tenant_id, kind=RetentionArchive.Kind.AUDIT,
                                            last_seq__isnull=False)
            .order_by("-last_seq").values_list("last_seq", flat=True).first())
    if last is None:
        return 0
    table = AuditEvent._meta.db_table
    sql = (f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE tenant_id = %s AND chain_seq <= %s "
           f"ORDER BY chain_seq LIMIT %s)")
    connection = connections[archive_alias()]
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL agentplatform.retention = 'on'")
        cursor.execute(sql, [tenant_id, last, batch])
        return cursor.rowcount
