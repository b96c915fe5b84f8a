"""The governed call costs the call, not the requester's history: every statement of a gated
cancellation (asked, confirmed by its requester, run) and of an approver-gated refund (asked,
approved by two approvers, run) reads a handful of rows while the requester already has thousands of
decided requests and the tenant hundreds of waiting ones, with the planner's statistics fresh and
with none (a server without autovacuum). Each captured statement is re-run
under `EXPLAIN (ANALYZE)` in a rolled-back savepoint; asserted on the rows each plan walked, not on
time (docs/performance.md, "Scale")."""
from __future__ import annotations

import datetime
import uuid

import psycopg
import pytest
from django.db import IntegrityError, connection

from agentplatform.runtime import services
from agentplatform.runtime.models import Conversation, Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from core import clock
from tests.approvals.list_support import history_build
from tests.plan_support import explain
from tools.catalog.models import Order
from tools.models import Tool

pytestmark = pytest.mark.postgres

# What one statement may walk: its own rows plus a few neighbours, never the history (thousands).
ROWS_WALKED_AT_MOST = 60
HISTORY = 3000
WAITING_OF_OTHERS = 400


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


# Tables sized by the platform's configuration (permissions, grants, group memberships, tools),
# not by what the tenant has done: a sequential scan of a few hundred of their rows is the planner's
# right choice at that size.
CONFIGURATION = {"auth_permission", "django_content_type", "auth_group", "tenancy_user_groups",
                 "guardian_userobjectpermission", "guardian_groupobjectpermission", "tools_tool"}


def _walked(plan: dict) -> int:
    """Rows a plan read and threw away, plus every row a sequential scan returned, on the tables
    that grow with use (CONFIGURATION left out)."""
    total = 0
    for node in _nodes(plan):
        if node.get("Relation Name") in CONFIGURATION:
            continue
        loops = int(node.get("Actual Loops", 1)) or 1
        total += int(node.get("Rows Removed by Filter", 0)) * loops
        total += int(node.get("Rows Removed by Index Recheck", 0)) * loops
        if node["Node Type"] == "Seq Scan":
            total += int(node.get("Actual Rows", 0)) * loops
    return total


def _explained(statements: list[tuple[str, object]], plans: str) -> list[tuple[int, str]]:
    """(rows walked, statement) for every read and write that can be re-run harmlessly, each
    explained as a custom plan (the parameters' values known to the planner) or as the generic
    plan a prepared statement may switch to after five runs (tests.plan_support.explain)."""
    found = []
    for sql, params in statements:
        head = sql.lstrip().split(None, 1)[0].upper()
        if head not in {"SELECT", "UPDATE", "DELETE", "WITH"}:
            continue
        try:
            plan = explain(sql, params, plans=plans)
        except (IntegrityError, psycopg.IntegrityError):  # a re-run insert meeting its own row's unique key: not a read
            continue
        scans = ", ".join(f"{node['Node Type']} {node.get('Index Name') or node.get('Relation Name', '')} {node.get('Index Cond', '')} {node.get('Filter', '')}".strip()
                          for node in _nodes(plan) if "Scan" in node["Node Type"])
        found.append((_walked(plan), f"{' '.join(sql.split())[:60]} ... {' '.join(sql.split())[-300:]} [{scans}]"))
    return found


def _history(requester, approvers, others) -> None:
    """The requester's history (decided cancellations and refunds, each for its own order, five
    to a conversation) and other users' waiting cancellations (one conversation each)."""
    refunds = history_build(requester=requester, approvers=approvers, decided=HISTORY // 2, waiting=0, start=0)
    conversations = Conversation.objects.bulk_create(
        [Conversation(tenant_id=requester.tenant_id, user=requester, title=f"history {n}") for n in range(HISTORY // 5)])
    for n, row in enumerate(refunds):
        row.conversation_id = conversations[n // 5].pk
    ConfirmationRequest.objects.bulk_update(refunds, ["conversation_id"], batch_size=2000)
    tool = Tool.objects.get(name="cancel_order")
    now = clock.now()
    rows = []
    for n in range(HISTORY // 2):
        order = f"A8{n:011d}"
        rows.append(ConfirmationRequest(
            tenant_id=requester.tenant_id, user=requester, conversation_id=conversations[HISTORY // 10 + n // 5].pk,
            tool_call_id=f"h_{n}",
            tool_id=tool.pk, tool_name="cancel_order", arguments={"order_id": order, "reason": "history"},
            masked_arguments={"order_id": order, "reason": "history"}, arguments_hash=f"{n:064d}",
            summary=f"Cancel {order}", risk="HIGH", policy="REQUESTER", status="CONSUMED",
            idempotency_key=f"cancel_order:{order}", business_object=f"order:{order}",
            token_hash=f"h{n:063d}", decided_at=now, expires_at=now - datetime.timedelta(hours=1)))
    waiting = others * (WAITING_OF_OTHERS // len(others))
    theirs = Conversation.objects.bulk_create(
        [Conversation(tenant_id=requester.tenant_id, user=other, title="waiting") for other in waiting])
    for n, other in enumerate(waiting):
        order = f"A7{n:011d}"
        rows.append(ConfirmationRequest(
            tenant_id=requester.tenant_id, user=other, conversation_id=theirs[n].pk, tool_call_id=f"w_{n}",
            tool_id=tool.pk, tool_name="cancel_order", arguments={"order_id": order, "reason": "waiting"},
            masked_arguments={"order_id": order, "reason": "waiting"}, arguments_hash=f"{n:064d}",
            summary=f"Cancel {order}", risk="HIGH", policy="REQUESTER", status="PENDING",
            idempotency_key=f"cancel_order:{order}", business_object=f"order:{order}",
            token_hash=f"w{n:063d}", expires_at=now + datetime.timedelta(hours=2)))
    ConfirmationRequest.objects.bulk_create(rows, batch_size=2000)


@pytest.fixture
def busy_tenant(db, people):
    acme = people["acme"]
    _history(acme["requester"], [acme["approver1"], acme["approver2"]], [acme["approver1"], acme["nobody"]])
    return acme


def _captured(fn) -> list[tuple[str, object]]:
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        fn()
    return statements


def _cycles(acme, on_commit) -> list[tuple[str, object]]:
    requester, approver1, approver2 = acme["requester"], acme["approver1"], acme["approver2"]

    def cancel():
        first = services.chat_send(user=requester, message="Cancel A202607290001 because the customer changed their mind")
        [pending] = first.pending
        done = services.chat_send(user=requester, message="", conversation_id=first.run.conversation_id,
                                  confirmation_token=pending.token)
        assert done.run.status == Run.Status.COMPLETED

    def refund():
        first = services.chat_send(user=requester, message="Refund A202607290003 amount 50 because it arrived broken")
        [pending] = first.pending
        assert pending.needs == "approvers"
        for approver in (approver1, approver2):
            with on_commit(execute=True):  # the resume the last approval enqueues
                approver_actions.confirmation_approve(request_id=uuid.UUID(pending.confirmation_id), approver=approver)
        assert Run.objects.get(pk=first.run.pk).status == Run.Status.COMPLETED

    return _captured(cancel) + _captured(refund)


@pytest.mark.parametrize("statistics", ["fresh", "none"])
@pytest.mark.parametrize("plans", ["custom", "generic"])
def test_no_statement_of_a_governed_call_walks_the_history(busy_tenant, statistics, plans,
                                                          django_capture_on_commit_callbacks):
    with connection.cursor() as cursor:
        if statistics == "fresh":
            cursor.execute("ANALYZE")
        else:  # as on a server without autovacuum: the planner has row counts, no column statistics
            cursor.execute("DELETE FROM pg_statistic WHERE starelid IN ("
                           "'approvals_confirmationrequest'::regclass, 'approvals_approval'::regclass)")
    statements = _cycles(busy_tenant, django_capture_on_commit_callbacks)
    assert Order.objects.get(tenant=busy_tenant["requester"].tenant, order_id="A202607290001").status == "CANCELLED"
    explained = _explained(statements, plans)
    assert len(explained) >= 20  # the reads and writes of both cycles were re-run
    heavy = [f"{walked} rows: {sql}" for walked, sql in explained if walked > ROWS_WALKED_AT_MOST]
    assert heavy == [], "\n".join(heavy)
