"""A tool that refuses (ToolBusinessError) after it already wrote: the write is undone, the refusal
is stored and audited once, and it is replayed without running the tool again. A tool declared
read_only runs without that savepoint; if it writes anyway, the call fails and nothing stays.
(tools.idempotency.run_action)
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db.models import F
from pydantic import BaseModel, ConfigDict

from agentplatform.runtime.services import conversation_create
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import ORDER, assistant, audit_rows, tool_context
from tools.catalog.models import Order
from tools.context import ToolContext
from tools.errors import ToolBusinessError
from tools.hashing import key_hash
from tools.manager import ToolCallingManager
from tools.models import IdempotencyRecord
from tools.registry import ToolSpec

calls: list[str] = []


class BumpOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str


def _bump_then_refuse(ctx: ToolContext, params: BumpOrder) -> dict[str, Any]:
    # Writes first, then refuses: the write must not survive.
    calls.append(params.order_id)
    Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(amount=F("amount") + 1)
    raise ToolBusinessError("the order is frozen by finance", code="ORDER_FROZEN")


def _spec(name: str, *, risk: str = "LOW", keyed: bool = True, read_only: bool = False, execute=None) -> ToolSpec:
    return ToolSpec(
        name=name, description="Bump an order, then refuse (test tool).", parameters=BumpOrder,
        execute=execute or _bump_then_refuse, risk=risk, read_only=read_only,
        idempotency_key=(lambda ctx, p: key_hash(ctx.tenant_id, ctx.conversation_id, name, p.order_id))
        if keyed else None,
    )


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()


def _amount(user) -> Decimal:
    return Order.objects.get(tenant=user.tenant, order_id=ORDER).amount


def test_refusal_after_a_write_is_rolled_back_stored_and_replayed(db, requester, install_tool):
    # given: a keyed LOW tool that writes and then raises ToolBusinessError
    install_tool(_spec("test_bump_refuse"), users=[requester])
    before = _amount(requester)
    ctx = tool_context(requester, conversation_create(user=requester).pk)
    message = assistant(("call_1", "test_bump_refuse", {"order_id": ORDER}))

    # when: it is called twice with the same key
    first = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result
    second = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result

    # then: the write is undone, the tool ran once, the refusal is stored FAILED and replayed
    assert _amount(requester) == before
    assert calls == [ORDER]
    assert (first.success, first.code, first.message) == (False, "ORDER_FROZEN", "the order is frozen by finance")
    assert (second.success, second.code) == (False, "ORDER_FROZEN")
    record = IdempotencyRecord.objects.get(tool_name="test_bump_refuse")
    assert record.status == IdempotencyRecord.Status.FAILED and record.result["code"] == "ORDER_FROZEN"
    assert [r.decision for r in audit_rows(tool_name="test_bump_refuse")] == ["FAILED", "IDEMPOTENT_HIT"]


def test_refusal_of_a_keyless_tool_is_rolled_back_and_audited_once(db, requester, install_tool):
    install_tool(_spec("test_bump_refuse_nokey", keyed=False), users=[requester])
    before = _amount(requester)
    ctx = tool_context(requester, conversation_create(user=requester).pk)

    result = ToolCallingManager().execute_tool_calls(
        ctx, assistant(("call_1", "test_bump_refuse_nokey", {"order_id": ORDER}))).outcomes[0].result

    assert _amount(requester) == before
    assert calls == [ORDER]
    assert (result.success, result.code) == (False, "ORDER_FROZEN")
    assert not IdempotencyRecord.objects.filter(tool_name="test_bump_refuse_nokey").exists()
    rows = audit_rows(tool_name="test_bump_refuse_nokey")
    assert [(r.decision, r.status) for r in rows] == [("FAILED", "ORDER_FROZEN")]


def test_refusal_of_a_confirmed_call_consumes_the_confirmation(db, requester, install_tool):
    # given: a HIGH keyed tool (the requester confirms) whose call was confirmed
    install_tool(_spec("test_bump_refuse_high", risk="HIGH"), users=[requester])
    before = _amount(requester)
    conversation = conversation_create(user=requester)
    message = assistant(("call_1", "test_bump_refuse_high", {"order_id": ORDER}))
    waiting = ToolCallingManager().execute_tool_calls(tool_context(requester, conversation.pk), message)
    pending = waiting.pending[0]
    requester_actions.confirmation_confirm(token=pending.token, user=requester)

    # when: the confirmed call executes and the tool refuses after writing
    ctx = tool_context(requester, conversation.pk, confirmations={"call_1": pending.confirmation_id})
    result = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result

    # then: nothing it wrote stays, the confirmation is spent, the refusal is stored and audited
    assert (result.success, result.code) == (False, "ORDER_FROZEN")
    assert _amount(requester) == before and calls == [ORDER]
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert request.status == ConfirmationRequest.Status.CONSUMED
    assert IdempotencyRecord.objects.get(tool_name="test_bump_refuse_high").status == IdempotencyRecord.Status.FAILED
    decisions = [r.decision for r in audit_rows(tool_name="test_bump_refuse_high")]
    assert decisions[-1] == "FAILED" and "EXECUTED" not in decisions

    # and: consuming the same confirmation again executes nothing
    again = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result
    assert again.success is False and calls == [ORDER]


def _bump(ctx: ToolContext, params: BumpOrder) -> dict[str, Any]:
    calls.append(params.order_id)
    Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(amount=F("amount") + 1)
    return {"order_id": params.order_id}


def test_a_read_only_tool_that_writes_fails_and_its_write_is_rolled_back(db, requester, install_tool):
    # given: two tools declared read_only that write anyway, one succeeding and one refusing
    install_tool(_spec("test_ro_bump", read_only=True, execute=_bump), users=[requester])
    install_tool(_spec("test_ro_bump_refuse", read_only=True), users=[requester])
    before = _amount(requester)
    ctx = tool_context(requester, conversation_create(user=requester).pk)

    for name in ("test_ro_bump", "test_ro_bump_refuse"):
        result = ToolCallingManager().execute_tool_calls(
            ctx, assistant(("call_" + name, name, {"order_id": ORDER}))).outcomes[0].result

        # then: the call fails closed, the write is gone, no idempotency record claims it ran
        assert (result.success, result.code) == (False, "TOOL_EXECUTION_FAILED")
        assert _amount(requester) == before
        assert not IdempotencyRecord.objects.filter(tool_name=name).exists()
        assert [r.decision for r in audit_rows(tool_name=name)] == ["FAILED"]


def test_a_read_only_tool_runs_without_a_savepoint(transactional_db, requester):
    # transactional_db: no test transaction around the call, so its own atomic block is a real
    # transaction and any SAVEPOINT seen would be the tool's
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ctx = tool_context(requester, conversation_create(user=requester).pk)
    manager = ToolCallingManager()
    _, ctx = manager.resolve(ctx)
    with CaptureQueriesContext(connection) as captured:
        result = manager.execute_tool_calls(ctx, assistant(("call_l", "list_orders", {}))).outcomes[0].result
    assert result.success
    assert not [q for q in captured.captured_queries if "SAVEPOINT" in q["sql"].upper()]
