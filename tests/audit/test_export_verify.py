"""Exports carry the chain columns, and `python -m audit.verify_export` checks a file offline:
every row re-hashed from its columns, every link, gaps refused unless --partial; an edited,
deleted or reordered line is named. Also: the business object column and the stepwise check."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from audit import events
from audit.verify_reference import verify_tenant
from audit.export import EXPORT_COLUMNS, csv_lines, jsonl_lines
from audit.models import AuditEvent
from audit.verify_export import Unfit, verify
from audit.verify_steps import verify_step

ROOT = Path(__file__).resolve().parents[2]


def _rows(user, n: int = 6) -> list[AuditEvent]:
    """Rows with the values that are hardest to carry through CSV: a formula-like message, a quote,
    non-ASCII, whole and fractional floats, nested JSON, commas and newlines."""
    written = []
    for i in range(n):
        written.append(events.tool_call_decided(
            tenant_id=user.tenant_id, actor_id=user.pk, decision="EXECUTED", tool_name="cancel_order", status="OK",
            masked_arguments={"order_id": f"A20260729{i:04d}", "reason": "客户, \"changed\"\nmind", "n": [i, 1e16, 0.1],
                              "amount": 2.5 + i},
            duration_ms=[2.0, 3.25, 10][i % 3], message=["=SUM(A1)", "'=quoted", "plain, with comma", "-1", "", "中文"][i % 6]))
    return written


def _export(tmp_path: Path, rows, kind: str) -> Path:
    path = tmp_path / f"trail.{kind}"
    path.write_bytes(b"".join((csv_lines if kind == "csv" else jsonl_lines)(rows)))
    return path


def _cli(path: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "audit.verify_export", str(path), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_whole_export_checks_offline_and_names_its_head(tmp_path, requester, kind):
    _rows(requester)
    rows = AuditEvent.objects.filter(tenant=requester.tenant)
    path = _export(tmp_path, rows, kind)
    head = rows.order_by("-chain_seq").first()

    count, head_hash, gaps, redacted = verify(str(path))

    assert (count, head_hash, gaps, redacted) == (rows.count(), head.row_hash, 0, 0)
    code, out = _cli(path)
    assert code == 0 and f"OK: {rows.count()} rows, head {head.row_hash}" in out


def test_the_export_has_every_hashed_column_and_the_chain(tmp_path, requester):
    _rows(requester, 1)
    path = _export(tmp_path, AuditEvent.objects.filter(tenant=requester.tenant), "csv")
    header = next(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert header == EXPORT_COLUMNS
    hashed = {f.attname for f in AuditEvent._meta.concrete_fields} - {"chain_seq", "prev_hash", "row_hash",
                                                                     "business_object"}
    assert hashed <= set(header)
    assert {"chain_seq", "prev_hash", "row_hash", "body_sha256"} <= set(header)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_an_edited_line_is_named(tmp_path, requester, kind):
    _rows(requester)
    path = _export(tmp_path, AuditEvent.objects.filter(tenant=requester.tenant), kind)
    lines = path.read_text(encoding="utf-8").split("\n")
    target = next(i for i, line in enumerate(lines) if "A202607290003" in line)
    lines[target] = lines[target].replace("A202607290003", "A202607290099", 1)
    path.write_text("\n".join(lines), encoding="utf-8")

    with pytest.raises(Unfit, match="does not match its hash: the row was edited"):
        verify(str(path))
    code, out = _cli(path)
    assert code == 1 and out.startswith("BROKEN:") and "A202607290003" not in out


def test_a_deleted_line_is_named_unless_the_export_is_partial(tmp_path, requester):
    _rows(requester)
    path = _export(tmp_path, AuditEvent.objects.filter(tenant=requester.tenant), "jsonl")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    gone = json.loads(lines[3])["chain_seq"]
    path.write_text("".join(lines[:3] + lines[4:]), encoding="utf-8")

    with pytest.raises(Unfit, match=f"chain_seq={gone}..{gone} are missing"):
        verify(str(path))
    count, _, gaps, _ = verify(str(path), partial=True)
    assert (count, gaps) == (len(lines) - 1, 1)


def test_swapped_lines_and_a_forged_link_are_named(tmp_path, requester):
    _rows(requester)
    path = _export(tmp_path, AuditEvent.objects.filter(tenant=requester.tenant), "jsonl")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:2] + [lines[3], lines[2]] + lines[4:]), encoding="utf-8")
    with pytest.raises(Unfit):
        verify(str(path), partial=True)


def test_a_filtered_export_checks_with_partial(tmp_path, requester, outsider):
    _rows(requester)
    _rows(outsider, 2)  # another tenant's rows never reach this tenant's export
    rows = AuditEvent.objects.filter(tenant=requester.tenant, business_object__in=["A202607290001", "A202607290004"])
    path = _export(tmp_path, rows, "csv")
    assert _cli(path)[0] == 1
    code, out = _cli(path, "--partial")
    assert code == 0 and "OK: 2 rows" in out and "1 gap(s)" in out


def test_an_unreadable_file_exits_2(tmp_path):
    assert _cli(tmp_path / "missing.csv")[0] == 2
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    code, out = _cli(bad)
    assert code == 1 and "lacks the chain columns" in out


def test_rows_carry_their_business_object_outside_the_hash(requester):
    _rows(requester, 2)
    events.control_change_recorded(tenant_id=requester.tenant_id, status="CHANGED", message="x",
                                   masked_arguments={"object": {"type": "user", "id": "acme-requester"}})
    events.tool_call_decided(tenant_id=requester.tenant_id, decision="EXECUTED", tool_name="query_inventory",
                             masked_arguments={"warehouse_code": "WH-HZ-01", "sku": "SKU-10001"})
    objects = list(AuditEvent.objects.filter(tenant=requester.tenant).order_by("-chain_seq")
                   .values_list("business_object", flat=True)[:4])
    assert objects == ["SKU-10001", "acme-requester", "A202607290001", "A202607290000"]
    assert verify_tenant(requester.tenant).ok


def test_the_stepwise_check_walks_the_chain_and_agrees_with_audit_verify(requester):
    _rows(requester, 7)
    head = AuditEvent.objects.filter(tenant=requester.tenant).count()
    steps, after = 0, 0
    while True:
        report = verify_step(tenant_id=requester.tenant_id, after=after, limit=3)
        steps += 1
        assert report.ok, report.problem
        if report.done:
            break
        assert report.checked_through == after + 3
        after = report.checked_through
    assert (report.checked_through, report.head_seq) == (head, head)
    assert steps == -(-head // 3)  # bounded: one request per 3 rows, no extra round trip


@pytest.mark.postgres
def test_the_stepwise_check_names_an_edited_row(requester):
    from django.db import connection

    rows = _rows(requester, 5)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only")
        cursor.execute("UPDATE audit_auditevent SET message = 'nothing to see' WHERE id = %s", [rows[3].pk])
        cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only")
    bad = rows[3].chain_seq
    after, report = 0, None
    for _ in range(100):
        report = verify_step(tenant_id=requester.tenant_id, after=after, limit=4)
        if report.done:
            break
        after = report.checked_through
    assert not report.ok and report.bad_seq == bad
    assert f"chain_seq={bad} id={rows[3].pk} does not match its hash" in report.problem
    assert report.checked_through == bad - 1


def test_a_row_shown_redacted_keeps_its_secret_out_and_is_checked_by_its_digest(tmp_path, requester, monkeypatch):
    _rows(requester, 2)
    # a row stored before messages lost their URL passwords on the way in (only the display masked them)
    monkeypatch.setattr(events, "scrub_urls", lambda text: text)
    events.tool_call_decided(tenant_id=requester.tenant_id, decision="FAILED", tool_name="cancel_order",
                             message="server at https://bob:hunter2@mcp.example.com/mcp?api_key=s3cret failed")
    rows = AuditEvent.objects.filter(tenant=requester.tenant)
    for kind in ("csv", "jsonl"):
        path = _export(tmp_path, rows, kind)
        text = path.read_text(encoding="utf-8")
        assert "hunter2" not in text and "s3cret" not in text
        count, _, _, redacted = verify(str(path))
        assert (count, redacted) == (rows.count(), 1)
        code, out = _cli(path)
        assert code == 0 and "1 row(s) redacted on export" in out
