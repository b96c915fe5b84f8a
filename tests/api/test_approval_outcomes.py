"""The approvers' API shows the facts beside the arguments and the real outcome
of the execution (a refused or failed call is never EXECUTED); the run API says the same."""
from __future__ import annotations

from decimal import Decimal

from agentplatform.runtime import services
from approvals.models import ConfirmationRequest
from tests.api.conftest import REFUND_ORDER
from tools.catalog.models import Order, Refund


def _approve(client, request_id):
    response = client.post(f"/api/v1/approvals/{request_id}/approve/", {}, format="json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


def test_pending_item_has_live_facts_and_the_assistants_words_apart(api, requester, approver1):
    services.chat_send(user=requester, message=f"Refund {REFUND_ORDER} amount 500 because Click Approve now")
    [item] = api(approver1).get("/api/v1/approvals/").json()["results"]
    assert item["summary"] == f"Refund CNY 500.00 of order {REFUND_ORDER} / 退款 CNY 500.00，订单 {REFUND_ORDER}"
    assert item["facts"]["snapshot"]["order_total"]["display"] == "CNY 560.00"
    assert item["facts"]["live"]["refundable_remainder"]["display"] == "CNY 560.00"
    assert item["facts"]["changed"] == [] and item["facts"]["captured_at"]
    assert item["written_by_assistant"] == [{"field": "reason", "text": "Click Approve now", "truncated": False,
                                             "length": 17}]
    assert item["outcome"] == "PENDING" and item["outcome_code"] == ""


def test_a_refund_refused_at_consume_time_reads_refused_with_its_code(api, requester, approver1, approver2,
                                                                    django_capture_on_commit_callbacks):
    # given: a refund of 500 of an order of 560, approved once
    outcome = services.chat_send(user=requester, message=f"Refund {REFUND_ORDER} amount 500 because it broke")
    request_id = outcome.pending[0].confirmation_id
    _approve(api(approver1), request_id)
    # when: 100 is refunded through another channel, then the second approver approves
    order = Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER)
    Refund.objects.create(tenant=requester.tenant, order=order, amount=Decimal("100.00"), reason="by phone")
    pending = api(approver2).get("/api/v1/approvals/").json()["results"][0]
    assert "already_refunded" in pending["facts"]["changed"]  # the second approver is shown the change
    with django_capture_on_commit_callbacks(execute=True):
        _approve(api(approver2), request_id)
    # then: nothing more was refunded, and every surface says REFUSED with the code, not EXECUTED
    assert Refund.objects.filter(tenant=requester.tenant).count() == 1
    for approver in (approver1, approver2):
        [item] = api(approver).get("/api/v1/approvals/?status=history").json()["results"]
        assert (item["status"], item["outcome"], item["outcome_code"]) == \
            ("REFUSED", "REFUSED", "REFUND_EXCEEDS_AMOUNT")
        assert item["facts"]["live"] is None and item["facts"]["snapshot"]["already_refunded"]["amount"] == "0.00"
    run = api(requester).get(f"/api/v1/runs/{outcome.run.pk}/").json()
    [decision] = run["decisions"]
    assert (decision["outcome"], decision["outcome_code"]) == ("REFUSED", "REFUND_EXCEEDS_AMOUNT")


def test_a_consumed_call_that_failed_reads_failed_never_executed(api, requester, approver1):
    outcome = services.chat_send(user=requester, message=f"Refund {REFUND_ORDER} amount 50 because it broke")
    request_id = outcome.pending[0].confirmation_id
    _approve(api(approver1), request_id)
    # the business refused during execution (the row as the pipeline records it)
    ConfirmationRequest.objects.filter(pk=request_id).update(status=ConfirmationRequest.Status.CONSUMED,
                                                             outcome_code="PAYMENT_GATEWAY_DECLINED")
    [item] = api(approver1).get("/api/v1/approvals/?status=history").json()["results"]
    assert (item["status"], item["outcome"], item["outcome_code"]) == \
        ("CONSUMED", "FAILED", "PAYMENT_GATEWAY_DECLINED")
    [decision] = api(requester).get(f"/api/v1/runs/{outcome.run.pk}/").json()["decisions"]
    assert decision["outcome"] == "FAILED"
