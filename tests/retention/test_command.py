"""`manage.py retention_run` and the daily task: what they print and return, the beat entry, and a
broken online chain that is refused (nothing archived, nothing deleted) rather than cut."""
from __future__ import annotations

import io

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from agentplatform.retention.tasks import apply_retention
from audit.models import AuditEvent, RetentionArchive
from tests.retention.support import audit_rows, only_audit_retention


def _command(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("retention_run", *args, stdout=out)
    except SystemExit as exit_:
        return int(exit_.code), out.getvalue()
    return 0, out.getvalue()


def test_the_beat_schedule_runs_retention_daily():
    entry = django_settings.CELERY_BEAT_SCHEDULE["apply-retention"]
    assert entry["task"] == apply_retention.name and entry["schedule"] == 86_400.0


def test_a_dry_run_of_one_tenant_prints_what_is_due(requester, settings, tmp_path):
    only_audit_retention(settings, audit_days=365)
    settings.RETENTION_ARCHIVE_DIR = str(tmp_path)

    status, out = _command("--tenant", requester.tenant.slug, "--dry-run")

    assert status == 0
    assert out.startswith(f"DRY-RUN {requester.tenant.slug}: due audit 0")
    with pytest.raises(CommandError):
        _command("--tenant", "no-such-tenant")


def test_the_task_applies_every_tenants_retention(requester, outsider, settings, tmp_path):
    settings.RETENTION_ARCHIVE_DIR = str(tmp_path)

    done = apply_retention()

    assert set(done) >= {requester.tenant.slug, outsider.tenant.slug}
    assert set(done[requester.tenant.slug]) == {"run_events", "conversations", "requests", "audit"}


def test_a_broken_online_chain_is_refused_not_cut(requester, settings, tmp_path):
    # given: a row deleted around the trigger, as the tables' owner could
    only_audit_retention(settings, audit_days=365)
    settings.RETENTION_ARCHIVE_DIR = str(tmp_path)
    rows = audit_rows(requester, 4)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only")
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [rows[1].pk.hex if connection.vendor == "sqlite"
                                                                      else rows[1].pk])
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only")
    left = AuditEvent.objects.filter(tenant=requester.tenant).count()
    settings.RETENTION_AUDIT_DAYS = 365

    # when: retention runs two years later
    import datetime

    from agentplatform.retention.services import retention_run
    from audit.archive import ArchiveRefused

    with pytest.raises(ArchiveRefused, match=f"chain_seq={rows[2].chain_seq}"):
        retention_run(tenant=requester.tenant, now=rows[-1].occurred_at + datetime.timedelta(days=730),
                      root=tmp_path)

    # then: nothing archived, nothing deleted, no file left
    assert AuditEvent.objects.filter(tenant=requester.tenant).count() == left
    assert not RetentionArchive.objects.exists()
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
