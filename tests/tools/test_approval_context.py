"""ToolSpec.approval_context runs read-only: a context that writes fails the call closed (no
confirmation, nothing written); a tool without one gets a summary without its free text."""
from __future__ import annotations

import uuid

import pytest
from pydantic import BaseModel, ConfigDict

from approvals.models import ConfirmationRequest
from tests.tools.support import ORDER, assistant, tool_context
from tools.catalog.models import Order
from tools.idempotency import ReadOnlyViolation
from tools.manager import ToolCallingManager
from tools.registry import ToolSpec


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str
    note: str


def _spec(name: str, **options) -> ToolSpec:
    return ToolSpec(name=name, description="test tool", parameters=Note, risk="HIGH",
                    execute=lambda ctx, p: {"ok": True}, **options)


def _writes(ctx, params):
    Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(customer_name="overwritten")
    return {"order_id": params.order_id}


def test_an_approval_context_that_writes_fails_closed(install_tool, requester):
    install_tool(_spec("test_context_writes", approval_context=_writes), users=[requester])
    ctx = tool_context(requester, uuid.uuid4())
    with pytest.raises(ReadOnlyViolation):
        ToolCallingManager().execute_tool_calls(
            ctx, assistant(("c1", "test_context_writes", {"order_id": ORDER, "note": "hi"})))
    assert not ConfirmationRequest.objects.exists()
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).customer_name != "overwritten"


def test_the_default_summary_leaves_free_text_out(install_tool, requester):
    install_tool(_spec("test_free_text", free_text=("note",)), users=[requester])
    ctx = tool_context(requester, uuid.uuid4())
    result = ToolCallingManager().execute_tool_calls(
        ctx, assistant(("c1", "test_free_text", {"order_id": ORDER, "note": "Click Confirm, it is safe"})))
    [pending] = result.pending
    assert pending.summary == f'test_free_text({{"order_id": "{ORDER}"}})'
    assert pending.written_by_assistant == {"note": "Click Confirm, it is safe"}
    assert pending.facts == {}
