"""A per-tenant daily budget of model calls: a user with no tools still costs
the tenant a model call per message, so the calls themselves are counted and capped."""
from __future__ import annotations

import datetime
import json

from django.conf import settings
from django.db import connection

from core import clock
from core.errors import ModelQuotaExceeded
from agentplatform.runtime.models import ModelCallCount, TenantModelQuota


def model_call_admit(*, tenant_id: int) -> int:
    """Count one model call of `tenant_id` today (UTC) and return the day's count.

    The limit is the tenant's TenantModelQuota, else TENANT_MODEL_CALLS_PER_DAY; 0 = no limit. One
    statement: an upsert (`INSERT ... ON CONFLICT DO UPDATE ... RETURNING`, so racing calls never
    lose a count) that also returns the tenant's override. The agent loop sends the same statement
    with the writes of the step that precedes the model call (`admission_statement`: no statement
    and no commit of its own right before the call). Raises ModelQuotaExceeded (429, Retry-After until
    00:00 UTC) past the limit; refused calls are counted too.
    """
    sql, params = admission_statement(tenant_id=tenant_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        counted = cursor.fetchone()[0]
    return admission_check(counted)


def admission_statement(*, tenant_id: int) -> tuple[str, list]:
    """(SQL, params) of the upsert that counts one model call of `tenant_id` today (UTC). It
    returns one column: ARRAY[the day's count, the tenant's own limit or NULL], for
    `admission_check`. A single data-modifying statement (core.sql.batches.Together can send it)."""
    quote = connection.ops.quote_name
    table = quote(ModelCallCount._meta.db_table)
    quotas = quote(TenantModelQuota._meta.db_table)
    tenant_column = quote(TenantModelQuota._meta.get_field("tenant").column)
    pair = "ARRAY[{}, {}]" if connection.vendor == "postgresql" else "json_array({}, {})"
    sql = (f"INSERT INTO {table} (tenant_id, day, calls) VALUES (%s, %s, 1) "
           f"ON CONFLICT (tenant_id, day) DO UPDATE SET calls = {table}.calls + 1 "
           "RETURNING " + pair.format("calls", f"(SELECT q.{quote('calls_per_day')} FROM {quotas} q "
                                               f"WHERE q.{tenant_column} = %s)"))
    return sql, [tenant_id, clock.now().date(), tenant_id]


def admission_check(counted) -> int:
    """The day's count from what `admission_statement` returned ([count, override or None]; SQLite
    gives the array as its JSON text). Raises ModelQuotaExceeded past the limit."""
    if isinstance(counted, str):
        counted = json.loads(counted)
    calls, override = counted
    now = clock.now()
    limit = settings.TENANT_MODEL_CALLS_PER_DAY if override is None else override
    if limit and calls > limit:
        midnight = datetime.datetime.combine(now.date() + datetime.timedelta(days=1), datetime.time(),
                                             tzinfo=datetime.timezone.utc)
        raise ModelQuotaExceeded(f"this tenant used its {limit} model calls of today (UTC); try again tomorrow",
                                 retry_after=max(1, int((midnight - now).total_seconds())))
    return calls
