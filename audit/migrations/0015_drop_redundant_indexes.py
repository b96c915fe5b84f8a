"""Indexes that cost every audited call a write and serve no query: the audit table takes four to
five rows per governed cycle. The tenant's own index is covered by every composite index, which
all lead with it (`audit_event_time`, `audit_event_tool`, ...); the tool name and the decision
are compared by equality (their btree indexes stay), never with LIKE, so their `_like` twins go."""
import django.db.models.deletion
from django.db import migrations, models

from core.migration_ops import AlterFieldDropIndexConcurrently, DropPatternIndexConcurrently


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY on PostgreSQL: no lock queue behind a long transaction

    dependencies = [
        ('audit', '0014_retention_archive'),
        ('tenancy', '0003_user_is_service_account'),
    ]

    operations = [
        AlterFieldDropIndexConcurrently(
            model_name='auditevent',
            name='tenant',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant'),
        ),
        DropPatternIndexConcurrently(model_name='auditevent', name='tool_name'),
        DropPatternIndexConcurrently(model_name='auditevent', name='decision'),
    ]
