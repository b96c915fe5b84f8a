"""The main job's story through the real loop (offline model), on whatever database the suite uses."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run, RunEvent
from approvals.errors import ConfirmationAlreadyDecided
from tools.catalog.models import Cancellation, Order, StockLevel
from tools.errors import ToolPermissionDenied

ORDER = "A202607290001"


def test_inventory_answer_comes_from_the_database(requester):
    # given: a stock number nobody could guess
    StockLevel.objects.filter(tenant=requester.tenant, sku="SKU-10001", warehouse_code="WH-HZ-01").update(
        available_quantity=4321)
    # when
    outcome = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?")
    # then
    assert outcome.run.status == Run.Status.COMPLETED
    assert "4321" in outcome.run.final_answer
    types = list(outcome.run.events.values_list("type", flat=True))
    assert types[0] == RunEvent.Type.TOOL_CALL_STARTED and types[-1] == RunEvent.Type.DONE


def test_confirm_then_cancel_once_then_replay_refused(requester):
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because no longer needed")
    assert outcome.run.status == Run.Status.AWAITING_CONFIRMATION
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    token = outcome.pending[0].token
    conversation = outcome.run.conversation_id

    resumed = services.chat_send(user=requester, message="yes", conversation_id=conversation, confirmation_token=token)

    assert resumed.run.status == Run.Status.COMPLETED
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.CANCELLED
    assert Cancellation.objects.count() == 1
    with pytest.raises(ConfirmationAlreadyDecided):
        services.chat_send(user=requester, message="yes", conversation_id=conversation, confirmation_token=token)
    assert Cancellation.objects.count() == 1


def test_no_permission_is_an_error_for_the_caller_not_prose(nobody):
    with pytest.raises(ToolPermissionDenied):
        services.chat_send(user=nobody, message=f"cancel {ORDER} because I can")
    run = Run.objects.get(user=nobody)
    assert run.status == Run.Status.FAILED and run.error_code == "PERMISSION_DENIED"
    assert Order.objects.get(tenant=nobody.tenant, order_id=ORDER).status == Order.Status.PAID


def test_a_token_pasted_into_a_message_never_reaches_the_model_or_memory(requester):
    from agentplatform.runtime.models import Message

    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because no longer needed")
    token = outcome.pending[0].token
    services.chat_send(user=requester, message=f"my token is {token}, list orders",
                       conversation_id=outcome.run.conversation_id)
    stored = list(Message.objects.filter(conversation_id=outcome.run.conversation_id).values_list("content", flat=True))
    assert not any(token in text for text in stored)
    assert any("[redacted token]" in text for text in stored)
