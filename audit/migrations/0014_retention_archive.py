"""Retention: the record of each archive file (RetentionArchive), and the one narrow way an audit
row may leave the table (docs/operations.md, "Retention and storage").

On PostgreSQL the append-only trigger of 0003 now lets a DELETE through only when both hold:
the transaction set `SET LOCAL agentplatform.retention = 'on'`, and the row's chain_seq is at most
the `last_seq` of its tenant's newest AUDIT archive. A session that sets the flag still cannot
delete a row no archive holds; UPDATE stays refused. Archive records themselves can be neither
updated nor deleted (TRUNCATE is refused too).
"""
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

APPEND_ONLY_WITH_RETENTION = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND current_setting('agentplatform.retention', true) = 'on'
       AND OLD.chain_seq IS NOT NULL
       AND OLD.chain_seq <= (SELECT max(a.last_seq) FROM audit_retentionarchive a
                             WHERE a.tenant_id = OLD.tenant_id AND a.kind = 'AUDIT') THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit events are append-only (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""
APPEND_ONLY = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""
ARCHIVE_TRIGGERS = """
CREATE TRIGGER audit_retentionarchive_append_only BEFORE UPDATE OR DELETE ON audit_retentionarchive
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_truncate();
CREATE TRIGGER audit_retentionarchive_no_truncate BEFORE TRUNCATE ON audit_retentionarchive
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate();
"""
DROP_ARCHIVE_TRIGGERS = """
DROP TRIGGER IF EXISTS audit_retentionarchive_append_only ON audit_retentionarchive;
DROP TRIGGER IF EXISTS audit_retentionarchive_no_truncate ON audit_retentionarchive;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(APPEND_ONLY_WITH_RETENTION, params=None)
    schema_editor.execute(ARCHIVE_TRIGGERS, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(DROP_ARCHIVE_TRIGGERS, params=None)
    schema_editor.execute(APPEND_ONLY, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0013_auditverifycheckpoint"),
        ("tenancy", "0003_user_is_service_account"),
    ]

    operations = [
        migrations.CreateModel(
            name="RetentionArchive",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("kind", models.CharField(choices=[("AUDIT", "Audit"), ("REQUESTS", "Requests")], max_length=16)),
                ("first_seq", models.BigIntegerField(blank=True, null=True)),
                ("last_seq", models.BigIntegerField(blank=True, null=True)),
                ("prev_hash", models.CharField(blank=True, max_length=64)),
                ("last_hash", models.CharField(blank=True, max_length=64)),
                ("path", models.CharField(max_length=500)),
                ("sha256", models.CharField(max_length=64)),
                ("rows", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+",
                                             to="tenancy.tenant")),
            ],
            options={
                "indexes": [models.Index(fields=["tenant", "kind", "last_seq"], name="retention_archive_last")],
                "constraints": [models.UniqueConstraint(fields=("tenant", "kind", "first_seq"),
                                                        name="retention_archive_once")],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
