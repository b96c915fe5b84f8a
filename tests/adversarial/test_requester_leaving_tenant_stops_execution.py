"""The requester leaves the tenant between confirming and the consume.

A call the requester confirmed while a member does not execute in the old tenant once they have
moved to another one, even when the approvers' decision later resumes the run."""

from agentplatform.runtime import services
from agentplatform.tenancy.models import User
from approvals import approver_actions, requester_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, ORDER, REFUND_ORDER
from tools.catalog.models import Cancellation, Order


def test_requester_moved_to_another_tenant_still_executes_in_the_old_one(requester, approver1, approver2, outsider,
                                                                          model, django_capture_on_commit_callbacks):
    model.calls(("c", "cancel_order", CANCEL_ARGS),
                ("r", "refund_order", {"order_id": REFUND_ORDER, "amount": "10", "reason": "broken parcel"}))
    model.says("done")
    first = services.chat_send(user=requester, message="x")
    tok = next(p for p in first.pending if p.tool_call_id == "c")
    rid = next(p.confirmation_id for p in first.pending if p.tool_call_id == "r")
    requester_actions.confirmation_confirm(token=tok.token, user=requester)
    # the operator moves the requester to the other tenant (she left acme)
    User.objects.filter(pk=requester.pk).update(tenant=outsider.tenant)
    for a in (approver1, approver2):
        with django_capture_on_commit_callbacks(execute=True):
            approver_actions.confirmation_approve(request_id=rid, approver=a)
    c = ConfirmationRequest.objects.get(pk=tok.confirmation_id)
    print("cancel request", c.status, c.outcome_code, "| acme order", Order.objects.get(order_id=ORDER).status,
          "| cancellations", list(Cancellation.objects.values_list("tenant_id", "requested_by_id")))
    assert Order.objects.get(order_id=ORDER).status == "PAID", "a non-member's decision executed in acme"
