"""A per-tenant daily budget of model calls (issue 9, item 8): a user with no tools still costs
the tenant a model call per message, so the calls themselves are counted and capped."""
from __future__ import annotations

import datetime

from django.conf import settings
from django.db import connection

from agentplatform import clock
from agentplatform.errors import ModelQuotaExceeded
from agentplatform.runtime.models import ModelCallCount, TenantModelQuota


def model_call_admit(*, tenant_id: int) -> int:
    """Count one model call of `tenant_id` today (UTC) and return the day's count.

    The limit is the tenant's TenantModelQuota, else TENANT_MODEL_CALLS_PER_DAY; 0 = no limit (and
    no write). One upsert (`INSERT ... ON CONFLICT DO UPDATE ... RETURNING`), so racing calls never
    lose a count. Raises ModelQuotaExceeded (429, Retry-After until 00:00 UTC) past the limit;
    refused calls are counted too.
    """
    override = TenantModelQuota.objects.filter(tenant_id=tenant_id).values_list("calls_per_day", flat=True).first()
    limit = settings.TENANT_MODEL_CALLS_PER_DAY if override is None else override
    if not limit:
        return 0
    now = clock.now()
    table = connection.ops.quote_name(ModelCallCount._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} (tenant_id, day, calls) VALUES (%s, %s, 1) "
                       f"ON CONFLICT (tenant_id, day) DO UPDATE SET calls = {table}.calls + 1 RETURNING calls",
                       [tenant_id, now.date()])
        calls = cursor.fetchone()[0]
    if calls > limit:
        midnight = datetime.datetime.combine(now.date() + datetime.timedelta(days=1), datetime.time(),
                                             tzinfo=datetime.timezone.utc)
        raise ModelQuotaExceeded(f"this tenant used its {limit} model calls of today (UTC); try again tomorrow",
                                 retry_after=max(1, int((midnight - now).total_seconds())))
    return calls
