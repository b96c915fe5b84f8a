"""Archiving the oldest audit rows to a verifiable file, then deleting them, keeps the online chain
verifying across the cut; the file verifies on its own with `python -m audit.verify_export` and
fails once edited; another tenant's trail is untouched; a dry run changes nothing; a second run
does nothing more. SQLite and PostgreSQL."""
from __future__ import annotations

import json

from agentplatform.retention.services import retention_run
from audit.chain import online_chain_start
from audit.verify_reference import verify_tenant
from audit.models import AuditChainHead, AuditEvent, RetentionArchive
from audit.verify_steps import verify_step

from tests.retention.support import audit_rows, now_cutting_before, only_audit_retention, verify_file


def test_archive_then_prune_keeps_the_chain_verifying_across_the_cut(requester, settings, tmp_path):
    # given: the tenant's trail, of which everything before `kept[0]` is older than the retention
    only_audit_retention(settings)
    audit_rows(requester, 5, "old")
    kept = audit_rows(requester, 3, "new")
    tenant = requester.tenant
    old_count = AuditEvent.objects.filter(tenant=tenant, chain_seq__lt=kept[0].chain_seq).count()

    # when
    report = retention_run(tenant=tenant, now=now_cutting_before(kept[0]), root=tmp_path)

    # then: the old rows left the table, into one archive that ends where the online chain starts
    [archive] = RetentionArchive.objects.filter(tenant=tenant, kind="AUDIT")
    assert (archive.first_seq, archive.last_seq, archive.rows) == (1, kept[0].chain_seq - 1, old_count)
    assert archive.last_hash == kept[0].prev_hash
    assert report.deleted["audit"] == old_count
    assert not AuditEvent.objects.filter(tenant=tenant, chain_seq__lt=kept[0].chain_seq).exists()
    assert online_chain_start(tenant.pk) == (kept[0].chain_seq, kept[0].prev_hash)
    check = verify_tenant(tenant)
    assert check.ok, check.problem
    # the kept rows and the run's own CONTROL_CHANGE row are online
    assert check.rows == 4
    run_row = AuditEvent.objects.get(tenant=tenant, chain_seq=check.head_seq)
    assert (run_row.decision, run_row.status) == ("CONTROL_CHANGE", "DELETED")
    assert run_row.masked_arguments["deleted"]["audit"] == old_count
    assert run_row.masked_arguments["archives"][0]["sha256"] == archive.sha256
    # and the file verifies on its own, against its manifest
    path = tmp_path / archive.path
    status, out = verify_file(path)
    assert status == 0, out
    assert f"OK: {old_count} rows, head {archive.last_hash}" in out
    manifest = json.loads((tmp_path / (archive.path + ".manifest.json")).read_text())
    assert {k: manifest[k] for k in ("tenant", "first_seq", "last_seq", "last_hash", "sha256", "rows")} == {
        "tenant": tenant.slug, "first_seq": 1, "last_seq": archive.last_seq, "last_hash": archive.last_hash,
        "sha256": archive.sha256, "rows": old_count}


def test_a_second_cut_continues_from_the_first_archive(requester, settings, tmp_path):
    only_audit_retention(settings)
    audit_rows(requester, 3, "first")
    middle = audit_rows(requester, 3, "second")
    last = audit_rows(requester, 2, "third")
    tenant = requester.tenant
    retention_run(tenant=tenant, now=now_cutting_before(middle[0]), root=tmp_path)
    again = retention_run(tenant=tenant, now=now_cutting_before(middle[0]), root=tmp_path)
    assert again.archives == [] and again.deleted["audit"] == 0  # nothing more at the same moment

    retention_run(tenant=tenant, now=now_cutting_before(last[0]), root=tmp_path)

    first, second = RetentionArchive.objects.filter(tenant=tenant, kind="AUDIT").order_by("first_seq")
    assert second.first_seq == first.last_seq + 1 and second.prev_hash == first.last_hash
    assert verify_file(tmp_path / first.path)[0] == 0
    status, out = verify_file(tmp_path / second.path)
    assert status == 0, out
    check = verify_tenant(tenant)
    assert check.ok, check.problem
    assert check.head_seq == AuditChainHead.objects.get(tenant=tenant).seq
    # the audit page's stepwise check starts after the newest archive too
    step = verify_step(tenant_id=tenant.pk, after=0, limit=2)
    assert step.ok and not step.done and step.checked_through == second.last_seq + 2
    while not step.done:
        step = verify_step(tenant_id=tenant.pk, after=step.checked_through, limit=2)
    assert step.ok and step.checked_through == check.head_seq


def test_an_archive_file_edited_afterwards_fails_its_manifest(requester, settings, tmp_path):
    only_audit_retention(settings)
    audit_rows(requester, 4, "old")
    kept = audit_rows(requester, 1, "new")
    retention_run(tenant=requester.tenant, now=now_cutting_before(kept[0]), root=tmp_path)
    archive = RetentionArchive.objects.get(tenant=requester.tenant, kind="AUDIT")
    path = tmp_path / archive.path
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    row = json.loads(lines[-1])
    row["message"] = "nothing happened here"
    lines[-1] = json.dumps(row, ensure_ascii=False) + "\n"

    path.write_text("".join(lines), encoding="utf-8")
    status, out = verify_file(path)

    assert status == 1
    assert "changed after it was archived" in out


def test_an_archive_file_that_lost_its_first_rows_fails_even_with_a_matching_manifest(requester, settings, tmp_path):
    """Whoever rewrites the file and its manifest's SHA-256 still cannot hide missing first rows:
    the manifest's start is the online chain's link (RetentionArchive.prev_hash in the database)."""
    only_audit_retention(settings)
    audit_rows(requester, 4, "old")
    kept = audit_rows(requester, 1, "new")
    retention_run(tenant=requester.tenant, now=now_cutting_before(kept[0]), root=tmp_path)
    archive = RetentionArchive.objects.get(tenant=requester.tenant, kind="AUDIT")
    path = tmp_path / archive.path
    manifest_path = tmp_path / (archive.path + ".manifest.json")
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[1:]), encoding="utf-8")
    from audit.verify_export import file_sha256
    manifest = json.loads(manifest_path.read_text())
    manifest.update(sha256=file_sha256(str(path)), rows=manifest["rows"] - 1)
    manifest_path.write_text(json.dumps(manifest))

    status, out = verify_file(path)

    assert status == 1
    assert "is not the manifest's first row" in out


def test_another_tenants_trail_is_untouched(requester, outsider, settings, tmp_path):
    only_audit_retention(settings)
    audit_rows(outsider, 3, "theirs")
    audit_rows(requester, 3, "old")
    kept = audit_rows(requester, 1, "new")
    theirs = list(AuditEvent.objects.filter(tenant=outsider.tenant).values_list("id", "row_hash").order_by("chain_seq"))

    retention_run(tenant=requester.tenant, now=now_cutting_before(kept[0]), root=tmp_path)

    assert list(AuditEvent.objects.filter(tenant=outsider.tenant).values_list("id", "row_hash")
                .order_by("chain_seq")) == theirs
    assert not RetentionArchive.objects.filter(tenant=outsider.tenant).exists()
    assert verify_tenant(outsider.tenant).ok
    assert not (tmp_path / outsider.tenant.slug).exists()


def test_a_dry_run_counts_and_changes_nothing(requester, settings, tmp_path):
    only_audit_retention(settings)
    audit_rows(requester, 4, "old")
    kept = audit_rows(requester, 1, "new")
    before = list(AuditEvent.objects.filter(tenant=requester.tenant).values_list("id", flat=True).order_by("chain_seq"))

    report = retention_run(tenant=requester.tenant, now=now_cutting_before(kept[0]), root=tmp_path, dry_run=True)

    assert report.deleted["audit"] == len(before) - 1
    assert list(AuditEvent.objects.filter(tenant=requester.tenant).values_list("id", flat=True)
                .order_by("chain_seq")) == before
    assert not RetentionArchive.objects.exists()
    assert list(tmp_path.iterdir()) == []


def test_verification_names_rows_deleted_without_an_archive(requester, settings, tmp_path):
    """The verifier starts after the newest archive only: rows gone without one are still reported."""
    only_audit_retention(settings)
    audit_rows(requester, 4, "old")
    kept = audit_rows(requester, 2, "new")
    retention_run(tenant=requester.tenant, now=now_cutting_before(kept[0]), root=tmp_path)
    forged = RetentionArchive.objects.get(tenant=requester.tenant, kind="AUDIT")

    # a forged archive record that claims one more row than the file holds
    RetentionArchive.objects.create(tenant=requester.tenant, kind="AUDIT", first_seq=kept[0].chain_seq,
                                    last_seq=kept[0].chain_seq, prev_hash=forged.last_hash,
                                    last_hash="0" * 64, path="nowhere", sha256="0" * 64, rows=1)
    check = verify_tenant(requester.tenant)

    assert not check.ok
    assert f"chain_seq={kept[1].chain_seq}" in check.problem
