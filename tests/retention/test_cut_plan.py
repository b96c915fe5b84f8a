"""Finding where a retention run cuts the audit trail costs the same at 10 and at 10,000 rows of the
tenant: PostgreSQL reads the newest old row from the (tenant, occurred_at) index backwards, with
no sort over the old rows. Asserted on `EXPLAIN (ANALYZE, BUFFERS)`, not on time."""
from __future__ import annotations

import datetime
import json
import uuid

import pytest
from django.db import connection

from agentplatform.tenancy.models import Tenant
from audit.archive import newest_before
from audit.models import AuditEvent
from core import clock

pytestmark = pytest.mark.postgres


def _trail(tenant: Tenant, count: int) -> None:
    """`count` rows of `tenant`, one a minute back from a day ago (chain columns filled, not
    linked: the plan does not read the links)."""
    start = clock.now() - datetime.timedelta(days=1)
    AuditEvent.objects.bulk_create([
        AuditEvent(id=uuid.uuid4(), tenant=tenant, decision="EXECUTED", tool_name="cancel_order",
                   occurred_at=start - datetime.timedelta(minutes=count - n), chain_seq=n + 1, row_hash=f"{n:064d}")
        for n in range(count)], batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")


def _plan(tenant: Tenant) -> dict:
    text = newest_before(tenant_id=tenant.pk, before=clock.now(), first=1)[:1].explain(
        format="json", analyze=True, buffers=True)
    return json.loads(text)[0]["Plan"]


def _nodes(plan: dict) -> list[dict]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


def _blocks(plan: dict) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


@pytest.mark.parametrize("size", [10_000])
def test_the_cut_reads_one_index_entry_at_both_sizes(db, size):
    small, large = Tenant.objects.create(slug="cut-small", name="small"), Tenant.objects.create(slug="cut-large", name="large")
    _trail(small, 10)
    _trail(large, size)

    plans = {name: _plan(tenant) for name, tenant in (("small", small), ("large", large))}

    for name, plan in plans.items():
        nodes = _nodes(plan)
        assert not [n for n in nodes if "Sort" in n["Node Type"]], (name, nodes)
        scans = [n for n in nodes if n["Node Type"].startswith("Index")]
        assert scans and scans[0]["Scan Direction"] == "Backward", (name, nodes)
        assert scans[0]["Actual Rows"] == 1, (name, scans[0])
    assert _blocks(plans["large"]) <= _blocks(plans["small"]) + 3, plans


def test_the_cut_reads_one_index_entry_as_a_prepared_statements_generic_plan(db):
    """The same read with its tenant, time and first position bound and unknown to the planner
    (a connection that prepared it, DB_PREPARE_THRESHOLD): still one entry of the index backwards."""
    from tests.plan_support import blocks, captured, explain, nodes

    tenant = Tenant.objects.create(slug="cut-generic", name="generic")
    _trail(tenant, 10_000)
    [(sql, params)] = captured(lambda: newest_before(tenant_id=tenant.pk, before=clock.now(), first=1).first())
    plan = explain(sql, params, plans="generic")

    assert not [n for n in nodes(plan) if "Sort" in n["Node Type"]], plan
    scans = [n for n in nodes(plan) if n["Node Type"].startswith("Index")]
    assert scans and scans[0]["Actual Rows"] == 1, scans
    assert blocks(plan) <= 10, plan
