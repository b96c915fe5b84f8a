"""Another tenant's order, confirmation, run or conversation is never visible or usable
(objects of another tenant answer 404, not 403; the tenant comes from the ToolContext, never from
the model)."""
from __future__ import annotations

import json
import uuid

import pytest

from core.errors import NotFoundError
from agentplatform.runtime import selectors, services
from agentplatform.runtime.models import Run
from approvals import approver_actions, requester_actions
from approvals.errors import ConfirmationNotFound
from approvals.models import Approval, ConfirmationRequest
from tests.tools.support import GLOBEX_ORDER, ORDER, REFUND_ORDER, audit_rows, model  # noqa: F401 - fixtures
from tools.catalog.models import Cancellation, Order, Refund

Status = ConfirmationRequest.Status


def _tool_results(run: Run) -> list[dict]:
    return [json.loads(m["content"]) for m in run.state["messages"] if m["role"] == "tool"]


def test_globex_user_cannot_cancel_an_acme_order_id(outsider, requester):
    # the outsider asks for an acme order id: the precheck reads only the outsider's tenant, finds
    # no such order, and answers before any human is asked (no confirmation is minted)
    outcome = services.chat_send(user=outsider, message=f"cancel {ORDER} because it is a duplicate")

    assert outcome.pending == [] and not ConfirmationRequest.objects.exists()
    [result] = _tool_results(outcome.run)
    assert (result["success"], result["code"]) == (False, "ORDER_NOT_FOUND")
    assert outcome.run.status == Run.Status.COMPLETED
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    assert not Cancellation.objects.exists()
    # the outsider's own order with the same suffix was not touched either
    assert Order.objects.get(tenant=outsider.tenant, order_id=GLOBEX_ORDER).status == Order.Status.PAID


def test_globex_user_reads_only_globex_stock(outsider, model):
    model.calls(("call_inv", "query_inventory", {"sku": "SKU-10001", "warehouse_code": "WH-HZ-01"}))
    model.says("ok")

    services.chat_send(user=outsider, message="stock?")

    # globex was seeded with 7 more units than acme in every warehouse (120 + 7)
    assert model.tool_answers(1)["call_inv"]["data"]["total_available"] == 127


def test_globex_user_cannot_confirm_or_decline_an_acme_token(outsider, requester):
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it is a duplicate")
    token = outcome.pending[0].token

    with pytest.raises(ConfirmationNotFound) as confirm:
        requester_actions.confirmation_confirm(token=token, user=outsider)
    with pytest.raises(ConfirmationNotFound):
        requester_actions.confirmation_cancel(token=token, user=outsider)
    with pytest.raises(NotFoundError):  # the acme conversation does not exist for the outsider
        services.chat_send(user=outsider, message="yes", conversation_id=outcome.run.conversation_id,
                           confirmation_token=token)

    assert confirm.value.http_status == 404
    assert ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id).status == Status.PENDING
    assert Run.objects.get(pk=outcome.run.pk).status == Run.Status.AWAITING_CONFIRMATION
    # the refusal is audited in the outsider's tenant, without naming the acme request or tool
    refusals = audit_rows(actor=outsider, decision="REFUSED")
    assert refusals and all(r.tenant_id == outsider.tenant_id and r.confirmation_id is None and r.tool_name == ""
                            for r in refusals)


def test_globex_approver_cannot_see_approve_or_reject_an_acme_refund(outsider_approver, requester):
    outcome = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} because it arrived damaged")
    request_id = uuid.UUID(outcome.pending[0].confirmation_id)

    for decide in (lambda: approver_actions.confirmation_approve(request_id=request_id, approver=outsider_approver),
                   lambda: approver_actions.confirmation_reject(request_id=request_id, approver=outsider_approver,
                                                         reason="not mine")):
        with pytest.raises(ConfirmationNotFound) as refused:
            decide()
        assert refused.value.http_status == 404
    with pytest.raises(ConfirmationNotFound):
        requester_actions.confirmation_issue_token(request_id=request_id, user=outsider_approver)

    assert not Approval.objects.exists() and not Refund.objects.exists()
    assert ConfirmationRequest.objects.get(pk=request_id).status == Status.PENDING


def test_globex_user_cannot_get_an_acme_run_or_conversation(outsider, requester, approver1):
    outcome = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?")
    run, conversation = outcome.run, outcome.run.conversation

    for reader in (outsider, approver1):  # another tenant, and another user of the same tenant
        with pytest.raises(NotFoundError):
            selectors.run_get(user=reader, run_id=run.pk)
        with pytest.raises(NotFoundError):
            selectors.conversation_get(user=reader, conversation_id=conversation.pk)
        with pytest.raises(NotFoundError):
            services.chat_send(user=reader, message="hello", conversation_id=conversation.pk)
        assert not selectors.conversations_for(user=reader).filter(pk=conversation.pk).exists()
    with pytest.raises(NotFoundError):
        selectors.run_get(user=outsider, run_id="not-a-uuid")
    assert selectors.run_get(user=requester, run_id=run.pk) == run
