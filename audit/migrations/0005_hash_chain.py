"""The audit hash chain (audit.chain) and the refusal of TRUNCATE (issue 9, item 11).

Existing rows are chained per tenant in (occurred_at, id) order; on PostgreSQL the append-only
trigger is switched off for that backfill only, inside this migration's transaction.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


LINK_FUNCTION = """
CREATE OR REPLACE FUNCTION audit_chain_link(prev text, seq bigint, body text) RETURNS text AS $$
    SELECT encode(sha256(convert_to(prev || ':' || seq::text || ':' || body, 'UTF8')), 'hex')
$$ LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE;
"""
# TRUNCATE fires no row trigger, so the append-only trigger of 0003 does not see it; `manage.py
# flush` and a plain TRUNCATE are refused here. The chain head may move forward (every INSERT does)
# but is never deleted.
REFUSE_FUNCTION = """
CREATE OR REPLACE FUNCTION audit_refuse_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only (% on % refused)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""
TRIGGERS = """
CREATE TRIGGER audit_event_no_truncate BEFORE TRUNCATE ON audit_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate();
CREATE TRIGGER audit_chainhead_no_truncate BEFORE TRUNCATE ON audit_auditchainhead
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate();
CREATE TRIGGER audit_chainhead_no_delete BEFORE DELETE ON audit_auditchainhead
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_truncate();
"""
DROP = """
DROP TRIGGER IF EXISTS audit_event_no_truncate ON audit_auditevent;
DROP TRIGGER IF EXISTS audit_chainhead_no_truncate ON audit_auditchainhead;
DROP TRIGGER IF EXISTS audit_chainhead_no_delete ON audit_auditchainhead;
DROP FUNCTION IF EXISTS audit_refuse_truncate();
DROP FUNCTION IF EXISTS audit_chain_link(text, bigint, text);
"""


def forwards(apps, schema_editor):
    from audit.chain import body_digest, link_hash

    postgres = schema_editor.connection.vendor == "postgresql"
    if postgres:
        schema_editor.execute(LINK_FUNCTION, params=None)
    AuditEvent = apps.get_model("audit", "AuditEvent")
    AuditChainHead = apps.get_model("audit", "AuditChainHead")
    names = [f.attname for f in AuditEvent._meta.concrete_fields]
    if AuditEvent.objects.exists():
        if postgres:
            schema_editor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only", params=None)
        heads: dict[int, tuple[int, str]] = {}
        for row in AuditEvent.objects.order_by("tenant_id", "occurred_at", "id").values(*names).iterator():
            seq, prev = heads.get(row["tenant_id"], (0, ""))
            seq += 1
            link = link_hash(prev, seq, body_digest(row))
            AuditEvent.objects.filter(pk=row["id"]).update(chain_seq=seq, prev_hash=prev, row_hash=link)
            heads[row["tenant_id"]] = (seq, link)
        for tenant_id, (seq, link) in heads.items():
            previous = AuditEvent.objects.get(tenant_id=tenant_id, chain_seq=seq).prev_hash
            AuditChainHead.objects.create(tenant_id=tenant_id, seq=seq, prev_hash=previous, hash=link)
        if postgres:
            # Fire the deferred foreign-key checks now: ALTER TABLE refuses a table with pending ones.
            schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE", params=None)
            schema_editor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only", params=None)
    if postgres:
        schema_editor.execute(REFUSE_FUNCTION, params=None)
        schema_editor.execute(TRIGGERS, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0004_control_change_decision'),
        ('tenancy', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditChainHead',
            fields=[
                ('tenant', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, primary_key=True, related_name='+', serialize=False, to='tenancy.tenant')),
                ('seq', models.BigIntegerField()),
                ('prev_hash', models.CharField(blank=True, max_length=64)),
                ('hash', models.CharField(max_length=64)),
            ],
        ),
        migrations.AddField(
            model_name='auditevent',
            name='chain_seq',
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='prev_hash',
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='row_hash',
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.AddConstraint(
            model_name='auditevent',
            constraint=models.UniqueConstraint(fields=('tenant', 'chain_seq'), name='audit_event_chain_position'),
        ),
    ]
