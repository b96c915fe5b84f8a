"""The four acceptance scenarios through the real loop, with the model faked at the HTTP edge:
the inventory answer comes from the service; no permission is an error for the caller, not model
prose; a cancellation waits for confirmation, runs once, and its token cannot be replayed; the
model repeating the cancellation gets the stored result, explained in the audit as IDEMPOTENT_HIT."""
from __future__ import annotations

import json

import pytest
from guardian.shortcuts import assign_perm

from agentplatform.runtime import services
from agentplatform.runtime.models import Run, RunEvent
from approvals.errors import ConfirmationAlreadyDecided
from approvals.models import ConfirmationRequest
from tests.tools.support import (  # noqa: F401 - fixtures
    CANCEL_ARGS,
    ORDER,
    audit_rows,
    model,
)
from tools.catalog.models import Cancellation, Order, StockLevel
from tools.errors import ToolPermissionDenied
from tools.models import IdempotencyRecord, Tool


def _order_status(user, order_id: str = ORDER) -> str:
    return Order.objects.get(tenant=user.tenant, order_id=order_id).status


# -- the inventory answer comes from the service -----------------------------------------------

def test_inventory_number_the_model_reads_is_the_databases(requester, model):
    # given: a stock number the model cannot know
    StockLevel.objects.filter(tenant=requester.tenant, sku="SKU-10001", warehouse_code="WH-HZ-01").update(
        available_quantity=4321)
    model.calls(("call_inv", "query_inventory", {"sku": "SKU-10001"}))
    model.says("We have 4351 units of SKU-10001.")

    # when
    outcome = services.chat_send(user=requester, message="How many SKU-10001 do we have?")

    # then: the tool result handed to the model carries the database's numbers (acme's, not globex's)
    rows = StockLevel.objects.filter(tenant=requester.tenant, sku="SKU-10001")
    answer = model.tool_answers(1)["call_inv"]
    assert answer["success"] is True and answer["code"] == "OK"
    assert answer["data"]["total_available"] == sum(r.available_quantity for r in rows) == 4351
    assert {w["warehouse_code"]: w["available_quantity"] for w in answer["data"]["warehouses"]} == {
        "WH-HZ-01": 4321, "WH-SH-02": 30}
    assert "cost_price" not in json.dumps(answer) and "supplier" not in json.dumps(answer)
    assert "4321" not in json.dumps(model.requests[0].body)  # the model could not have guessed it
    # and the service really ran: the pipeline audited an execution for this run
    [row] = audit_rows(run_id=outcome.run.pk, tool_name="query_inventory")
    assert (row.decision, row.status, row.actor_id) == ("EXECUTED", "OK", requester.pk)
    assert outcome.run.status == Run.Status.COMPLETED and outcome.run.final_answer == "We have 4351 units of SKU-10001."


# -- no permission -----------------------------------------------------------------------------

def test_no_permission_raises_to_the_caller_and_the_model_is_not_asked_to_explain(nobody, model):
    model.calls(("call_cancel", "cancel_order", CANCEL_ARGS))
    model.says("Sorry, you do not have permission.")  # prose the platform must not rely on

    with pytest.raises(ToolPermissionDenied):
        services.chat_send(user=nobody, message=f"cancel {ORDER}")

    assert len(model.requests) == 1  # the refusal went to the caller, not back to the model
    assert "tools" not in model.requests[0].body  # nobody is offered no tool at all
    run = Run.objects.get(user=nobody)
    assert (run.status, run.error_code) == (Run.Status.FAILED, "PERMISSION_DENIED")
    [row] = audit_rows(actor=nobody, tool_name="cancel_order")
    assert (row.decision, row.status) == ("DENIED", "PERMISSION_DENIED")
    assert _order_status(nobody) == Order.Status.PAID
    assert not ConfirmationRequest.objects.exists()


def test_use_tool_without_the_business_permission_is_still_denied(approver1, model):
    # approver1 may use the tool row but lacks catalog.cancel_order
    assign_perm("tools.use_tool", approver1, Tool.objects.get(name="cancel_order"))
    model.calls(("call_cancel", "cancel_order", CANCEL_ARGS))

    with pytest.raises(ToolPermissionDenied):
        services.chat_send(user=approver1, message=f"cancel {ORDER}")

    assert "tools" not in model.requests[0].body
    assert _order_status(approver1) == Order.Status.PAID


# -- confirmation first, then once, then the replay is refused ----------------------------------

def test_confirm_then_cancelled_once_then_replayed_token_refused(requester, model):
    model.calls(("call_cancel", "cancel_order", CANCEL_ARGS))
    model.says("Order cancelled.")

    # first call: CONFIRMATION_REQUIRED, order unchanged, the model is not called again
    first = services.chat_send(user=requester, message=f"cancel {ORDER} please")
    assert first.run.status == Run.Status.AWAITING_CONFIRMATION
    [pending] = first.pending
    assert pending.needs == "requester" and pending.token.startswith("ct_")
    assert _order_status(requester) == Order.Status.PAID and not Cancellation.objects.exists()
    assert len(model.requests) == 1
    event = first.run.events.get(type=RunEvent.Type.CONFIRMATION_REQUIRED)
    assert event.payload["confirmation_id"] == pending.confirmation_id and "token" not in event.payload

    # second call with the token: cancelled exactly once, and the model reads the business result
    second = services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                                confirmation_token=pending.token)
    assert second.run.pk == first.run.pk and second.run.status == Run.Status.COMPLETED
    answer = model.tool_answers(1)["call_cancel"]
    assert answer["success"] and answer["data"]["current_status"] == "CANCELLED"
    assert _order_status(requester) == Order.Status.CANCELLED
    [cancellation] = Cancellation.objects.all()
    assert answer["data"]["cancellation_id"] == str(cancellation.pk)
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.CONSUMED

    # third call replays the token: refused, nothing runs, the model is not called
    with pytest.raises(ConfirmationAlreadyDecided):
        services.chat_send(user=requester, message="yes again", conversation_id=first.run.conversation_id,
                           confirmation_token=pending.token)
    assert Cancellation.objects.count() == 1 and len(model.requests) == 2


# -- the model asks for the same cancellation twice ---------------------------------------------

def test_repeated_cancel_is_an_idempotent_hit_with_the_same_business_result(requester, model):
    model.calls(("call_1", "cancel_order", CANCEL_ARGS))
    model.calls(("call_2", "cancel_order", CANCEL_ARGS))  # the model repeats itself after the result
    model.says("Done.")
    first = services.chat_send(user=requester, message=f"cancel {ORDER}")

    outcome = services.chat_send(user=requester, message="ok", conversation_id=first.run.conversation_id,
                                 confirmation_token=first.pending[0].token)

    assert outcome.run.status == Run.Status.COMPLETED
    # one cancellation, one confirmation: the repeat did not cost a human's attention again
    assert Cancellation.objects.count() == 1 and ConfirmationRequest.objects.count() == 1
    assert _order_status(requester) == Order.Status.CANCELLED
    # the same business result both times
    assert model.tool_answers(2)["call_2"] == model.tool_answers(1)["call_1"]
    # and the audit trail explains the second call
    executed, hit = (audit_rows(tool_call_id=c, tool_name="cancel_order").pop() for c in ("call_1", "call_2"))
    assert (executed.decision, hit.decision) == ("EXECUTED", "IDEMPOTENT_HIT")
    assert hit.business_result_id == executed.business_result_id == str(Cancellation.objects.get().pk)
    assert hit.idempotency_key == executed.idempotency_key != ""
    assert IdempotencyRecord.objects.get().status == IdempotencyRecord.Status.SUCCEEDED


def test_same_order_other_reason_is_an_idempotency_conflict_not_a_new_request(requester, model):
    model.calls(("call_1", "cancel_order", CANCEL_ARGS))
    model.calls(("call_2", "cancel_order", {**CANCEL_ARGS, "reason": "another reason"}))
    model.says("Done.")
    first = services.chat_send(user=requester, message=f"cancel {ORDER}")

    services.chat_send(user=requester, message="ok", conversation_id=first.run.conversation_id,
                       confirmation_token=first.pending[0].token)

    answer = model.tool_answers(2)["call_2"]
    assert (answer["success"], answer["code"]) == (False, "IDEMPOTENCY_CONFLICT")
    assert Cancellation.objects.count() == 1 and ConfirmationRequest.objects.count() == 1
    [row] = audit_rows(tool_call_id="call_2")
    assert (row.decision, row.status) == ("REFUSED", "IDEMPOTENCY_CONFLICT")
