"""Indexes that cost every governed call a write and serve no query: each confirmation request is
inserted and updated three to four times per cycle, and a non-HOT update writes an entry into
every index of the table. The tenant's and the status' own indexes are covered by the composite
indexes that lead with them (`request_tenant_newest`, `request_due`, ...); the idempotency key is
read only together with the requester's open requests (`request_requester_open`); the token is
looked up by equality through its unique index, never with LIKE."""
import django.db.models.deletion
from django.db import migrations, models

from core.migration_ops import AlterFieldDropIndexConcurrently, DropPatternIndexConcurrently


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY on PostgreSQL: no lock queue behind a long transaction

    dependencies = [
        ('approvals', '0011_requester_open_index'),
        ('tenancy', '0003_user_is_service_account'),
    ]

    operations = [
        AlterFieldDropIndexConcurrently(
            model_name='confirmationrequest',
            name='idempotency_key',
            field=models.CharField(blank=True, help_text="The call's idempotency key: a newer request with it supersedes.", max_length=128),
        ),
        AlterFieldDropIndexConcurrently(
            model_name='confirmationrequest',
            name='status',
            field=models.CharField(choices=[('PENDING', 'Pending'), ('CONFIRMED', 'Confirmed'), ('CONSUMED', 'Consumed'), ('EXPIRED', 'Expired'), ('CANCELLED', 'Cancelled'), ('SUPERSEDED', 'Superseded'), ('REFUSED', 'Refused'), ('RESPONDED', 'Responded'), ('WITHDRAWN', 'Withdrawn')], default='PENDING', max_length=16),
        ),
        AlterFieldDropIndexConcurrently(
            model_name='confirmationrequest',
            name='tenant',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant'),
        ),
        DropPatternIndexConcurrently(model_name='confirmationrequest', name='token_hash'),
    ]
