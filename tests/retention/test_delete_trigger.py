"""PostgreSQL lets an audit row leave the table only through the retention path: the transaction's
`agentplatform.retention` flag AND an AUDIT archive of the tenant that holds the row's chain
position. Archive records can be neither changed nor deleted. Two concurrent retention runs of one
tenant archive each row once (the per-tenant advisory lock; the archive's unique range)."""
from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, close_old_connections, connection, transaction

from agentplatform.retention.services import retention_run
from audit.verify_reference import verify_tenant
from audit.models import AuditEvent, RetentionArchive

from tests.retention.support import audit_rows, now_cutting_before, only_audit_retention

pytestmark = pytest.mark.postgres


def _delete(sql: str, params: list, *, flag: bool) -> int:
    with transaction.atomic(), connection.cursor() as cursor:
        if flag:
            cursor.execute("SET LOCAL agentplatform.retention = 'on'")
        cursor.execute(sql, params)
        return cursor.rowcount


def test_a_delete_of_unarchived_rows_is_refused_even_with_the_flag(requester, settings, tmp_path):
    only_audit_retention(settings)
    rows = audit_rows(requester, 3)

    with pytest.raises(DatabaseError, match="append-only"):
        _delete("DELETE FROM audit_auditevent WHERE id = %s", [rows[0].pk], flag=True)

    assert AuditEvent.objects.filter(pk=rows[0].pk).exists()


def test_archived_rows_leave_only_with_the_flag_and_only_up_to_the_archive(requester, settings, tmp_path):
    only_audit_retention(settings)
    old = audit_rows(requester, 3, "old")
    new = audit_rows(requester, 2, "new")
    tenant = requester.tenant
    # an archive recorded, rows not yet deleted (a run stopped between the two)
    RetentionArchive.objects.create(tenant=tenant, kind="AUDIT", first_seq=1, last_seq=old[-1].chain_seq,
                                    prev_hash="", last_hash=old[-1].row_hash, path="x", sha256="0" * 64,
                                    rows=old[-1].chain_seq)

    with pytest.raises(DatabaseError, match="append-only"):
        _delete("DELETE FROM audit_auditevent WHERE id = %s", [old[0].pk], flag=False)
    with pytest.raises(DatabaseError, match="append-only"):
        _delete("DELETE FROM audit_auditevent WHERE tenant_id = %s", [tenant.pk], flag=True)  # the newer rows too
    with pytest.raises(DatabaseError, match="append-only"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL agentplatform.retention = 'on'")
            cursor.execute("UPDATE audit_auditevent SET message = 'edited' WHERE id = %s", [old[0].pk])
    assert AuditEvent.objects.filter(tenant=tenant).count() == new[-1].chain_seq
    assert verify_tenant(tenant).ok  # archived rows still online are skipped: their file holds them

    deleted = _delete("DELETE FROM audit_auditevent WHERE tenant_id = %s AND chain_seq <= %s",
                      [tenant.pk, old[-1].chain_seq], flag=True)

    assert deleted == old[-1].chain_seq
    assert verify_tenant(tenant).ok


def test_archive_records_cannot_be_changed_or_deleted(requester):
    record = RetentionArchive.objects.create(tenant=requester.tenant, kind="AUDIT", first_seq=1, last_seq=1,
                                             last_hash="a" * 64, path="x", sha256="0" * 64, rows=1)
    for sql in ("UPDATE audit_retentionarchive SET last_seq = 99 WHERE id = %s",
                "DELETE FROM audit_retentionarchive WHERE id = %s"):
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, [record.pk])
    assert RetentionArchive.objects.get(pk=record.pk).last_seq == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_runs_archive_each_row_once(people, settings, tmp_path):
    # given
    requester = people["acme"]["requester"]
    only_audit_retention(settings)
    settings.RETENTION_BATCH = 7  # many short deleting transactions, so the runs overlap
    audit_rows(requester, 60, "old")
    kept = audit_rows(requester, 1, "new")
    tenant = requester.tenant
    old_ids = set(AuditEvent.objects.filter(tenant=tenant, chain_seq__lt=kept[0].chain_seq).values_list("id", flat=True))
    start = threading.Barrier(4)
    reports, errors = [], []

    def run() -> None:
        try:
            start.wait()
            reports.append(retention_run(tenant=tenant, now=now_cutting_before(kept[0]), root=tmp_path))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            close_old_connections()
            connection.close()

    # when: four runs of the same tenant at once
    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then: one archive holds every old row once; the rows are gone; the chain verifies
    assert errors == []
    archives = list(RetentionArchive.objects.filter(tenant=tenant, kind="AUDIT"))
    assert len(archives) == 1 and archives[0].rows == len(old_ids)
    import json
    archived = [json.loads(line)["id"] for line in (tmp_path / archives[0].path).read_text().splitlines()]
    assert sorted(archived) == sorted(str(i) for i in old_ids)
    assert sum(r.deleted.get("audit", 0) for r in reports) == len(old_ids)
    assert not AuditEvent.objects.filter(id__in=old_ids).exists()
    assert verify_tenant(tenant).ok
