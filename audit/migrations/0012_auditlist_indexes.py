"""Indexes for the auditor's filtered lists and time-range exports: (tenant, filter column,
chain_seq), so each filtered page is read in chain order from an index and stops at the page's
end. The table is append-only (UPDATE/DELETE refused by trigger); CREATE INDEX is not refused."""

from django.conf import settings
from django.db import migrations, models

from core.migration_ops import AddIndexConcurrently, RemoveIndexConcurrently


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY on PostgreSQL: writes go on while it builds

    dependencies = [
        ('audit', '0011_auditevent_channel'),
        ('tenancy', '0003_user_is_service_account'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        RemoveIndexConcurrently(
            model_name='auditevent',
            name='audit_audit_tenant__a79171_idx',
        ),
        AddIndexConcurrently(
            model_name='auditevent',
            index=models.Index(fields=['tenant', 'occurred_at', 'chain_seq'], name='audit_event_time'),
        ),
        AddIndexConcurrently(
            model_name='auditevent',
            index=models.Index(fields=['tenant', 'tool_name', 'chain_seq'], name='audit_event_tool'),
        ),
        AddIndexConcurrently(
            model_name='auditevent',
            index=models.Index(fields=['tenant', 'status', 'chain_seq'], name='audit_event_status'),
        ),
        AddIndexConcurrently(
            model_name='auditevent',
            index=models.Index(fields=['tenant', 'actor', 'chain_seq'], name='audit_event_actor'),
        ),
        AddIndexConcurrently(
            model_name='auditevent',
            index=models.Index(fields=['tenant', 'decision', 'chain_seq'], name='audit_event_decision'),
        ),
    ]
