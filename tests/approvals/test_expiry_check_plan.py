"""The expiry check run before every page and API call ("is anything of this tenant due?",
approvals.expiry.confirmations_expire_due) and the sweeper's "is anything due?" cost the same at 10
and at 10,000 waiting requests: PostgreSQL answers both from the partial indexes on the waiting
rows' deadlines (`request_due_by_tenant`, `request_due`), reading a few index pages, not every
waiting row nor every decided request whose deadline has passed (the plain index on `expires_at`
walks those). Asserted on `EXPLAIN (ANALYZE, BUFFERS)`, not on time.
"""
from __future__ import annotations

import datetime
import json

import psycopg
import pytest
from django.db import connection

from agentplatform.runtime.models import Conversation
from approvals.models import ConfirmationRequest
from core import clock
from tests.plan_support import captured, explain
from tools.models import Tool

pytestmark = pytest.mark.postgres


def _requests(requester, count: int, *, start: int, decided: bool = False) -> None:
    """`count` requests of `requester`: PENDING and none due (deadlines an hour to a day ahead), or
    `decided` history (CONFIRMED, deadlines long past, as every decided request's is)."""
    conversation = Conversation.objects.create(tenant_id=requester.tenant_id, user=requester, title="waiting")
    tool = Tool.objects.get(name="cancel_order")
    now = clock.now()
    ConfirmationRequest.objects.bulk_create([
        ConfirmationRequest(
            tenant_id=requester.tenant_id, user=requester, conversation_id=conversation.pk,
            tool_call_id=f"call_{start + n}", tool_id=tool.pk, tool_name="cancel_order",
            arguments={"order_id": f"A{start + n:012d}"}, masked_arguments={}, arguments_hash=f"{start + n:064d}",
            summary="waiting", risk="HIGH", policy="REQUESTER", quorum=1,
            status="CONFIRMED" if decided else "PENDING",
            expires_at=now + datetime.timedelta(hours=-24 if decided else 1, seconds=(start + n) % 80_000))
        for n in range(count)], batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_confirmationrequest")


def _plan(queryset) -> dict:
    """The executed plan of what ConfirmationRequest.objects.any_due asks of `queryset` (the
    waiting requests): the earliest deadline, one row."""
    text = queryset.order_by("expires_at").values("expires_at")[:1].explain(format="json", analyze=True, buffers=True)
    return json.loads(text)[0]["Plan"]


def _blocks(plan: dict) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _index_names(plan: dict) -> set[str]:
    names = {plan["Index Name"]} if "Index Name" in plan else set()
    for child in plan.get("Plans", []):
        names |= _index_names(child)
    return names


def _generic(tenant_id: int | None) -> dict:
    """The executed *generic* plan of the same probe as a prepared statement, as the code sends it
    (ConfirmationRequestQuerySet.any_due: the status written into the statement, the tenant bound),
    which a connection that prepared it runs (DB_PREPARED_STATEMENTS): the tenant unknown to the
    planner."""
    where, args = ("status = 'PENDING' AND tenant_id = $1", [tenant_id]) if tenant_id else ("status = 'PENDING'", [])
    types = " (bigint)" if tenant_id else ""
    connection.ensure_connection()
    # A client-side-binding cursor sends PREPARE's text as is (psycopg's default cursor would take
    # its $1 for a parameter of its own).
    with psycopg.ClientCursor(connection.connection) as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE due_probe{types} AS SELECT expires_at FROM approvals_confirmationrequest "
                       f"WHERE {where} ORDER BY expires_at LIMIT 1")
        try:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE due_probe"
                           + (" (%s)" if args else ""), args)
            return _first_plan(cursor.fetchone()[0])
        finally:
            cursor.execute("DEALLOCATE due_probe")
            cursor.execute("RESET plan_cache_mode")


def _first_plan(explained) -> dict:
    data = json.loads(explained) if isinstance(explained, str) else explained
    return data[0]["Plan"]


def _probes(requester) -> tuple[dict, dict]:
    waiting = ConfirmationRequest.objects.filter(status="PENDING")
    return _plan(waiting.filter(tenant_id=requester.tenant_id)), _plan(waiting)


def test_the_expiry_check_reads_the_same_few_pages_at_10_and_at_10000_waiting(db, requester):
    _requests(requester, 10, start=0)
    _requests(requester, 10, start=10, decided=True)
    tenant_small, global_small = _probes(requester)
    _requests(requester, 9_980, start=20)
    _requests(requester, 9_990, start=10_000, decided=True)
    tenant_large, global_large = _probes(requester)

    due_indexes = {"request_due_by_tenant", "request_due"}
    assert _index_names(tenant_large) & due_indexes, tenant_large
    assert _index_names(global_large) & due_indexes, global_large
    # One more level of the index at most, never a page per waiting row.
    assert _blocks(tenant_large) <= _blocks(tenant_small) + 3, (tenant_small, tenant_large)
    assert _blocks(global_large) <= _blocks(global_small) + 3, (global_small, global_large)
    assert not ConfirmationRequest.objects.any_due(tenant_id=requester.tenant_id)
    assert not ConfirmationRequest.objects.any_due()
    # The same with the generic plan of a prepared statement (the tenant bound, as the code sends it).
    for plan in (_generic(requester.tenant_id), _generic(None)):
        assert _index_names(plan) & due_indexes, plan
        assert _blocks(plan) <= _blocks(tenant_small) + 4, plan


def test_any_due_says_whether_a_waiting_request_is_past_its_deadline(db, requester, people):
    _requests(requester, 3, start=0)
    _requests(requester, 3, start=3, decided=True)
    other = people["globex"]["requester"]
    assert not ConfirmationRequest.objects.any_due(tenant_id=requester.tenant_id)
    later = clock.now() + datetime.timedelta(hours=2)  # past the first waiting deadline (1 h ahead)
    assert ConfirmationRequest.objects.any_due(now=later, tenant_id=requester.tenant_id)
    assert ConfirmationRequest.objects.any_due(now=later)
    assert not ConfirmationRequest.objects.any_due(now=later, tenant_id=other.tenant_id)


def test_the_statements_the_expiry_sends_stay_cheap_as_generic_plans(db, requester):
    """The statements of the expiry check and of the sweep's read, as the code sends them, over a
    tenant whose decided requests (every status, deadlines long past) outnumber its waiting ones
    500 to 1: as prepared statements' generic plans (psycopg prepares after DB_PREPARE_THRESHOLD
    runs) they read a few index pages, never walk the deadlines of the decided history."""
    from django.db import transaction

    from approvals.expiry import confirmations_expire

    _requests(requester, 20, start=0)
    _requests(requester, 10_000, start=20, decided=True)
    with connection.cursor() as cursor:  # the decided history in every final status
        cursor.execute("UPDATE approvals_confirmationrequest SET status = (ARRAY['CONSUMED','CANCELLED','EXPIRED',"
                       "'CONFIRMED'])[1 + (abs(hashtext(tool_call_id)) % 4)] WHERE status = 'CONFIRMED'")
        cursor.execute("ANALYZE approvals_confirmationrequest")
    later = clock.now() + datetime.timedelta(hours=2)  # every waiting request due

    def expire_and_roll_back() -> None:
        with transaction.atomic():
            assert len(confirmations_expire(tenant_id=requester.tenant_id)) == 0  # nothing due now
            transaction.set_rollback(True)

    statements = captured(lambda: (ConfirmationRequest.objects.any_due(tenant_id=requester.tenant_id),
                                   ConfirmationRequest.objects.any_due(),
                                   expire_and_roll_back()), heads=("SELECT",))
    statements.append(captured(lambda: list(ConfirmationRequest.objects.due(now=later)
                                            .filter(tenant_id=requester.tenant_id).order_by("expires_at")[:500]))[0])
    assert len(statements) == 4, statements
    for sql, params in statements:
        assert "PENDING" not in params, (sql, params)  # written into the statement, not bound
        plan = explain(sql, params, plans="generic")
        assert _blocks(plan) <= 80, (sql, plan)
