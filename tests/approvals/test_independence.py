"""A decision counts only from an approver independent of the request (docs/approvals.md,
"Eligibility"): not the requester, standing not from the requester, standing held before the
request was created. Checked when deciding, when listing, and again at consume time."""
from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Group
from guardian.shortcuts import assign_perm

from agentplatform.controlplane.models import StandingSource
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from agentplatform.tenancy.models import User
from approvals import approver_actions
from approvals.errors import ApprovalForbidden, ApproverNotIndependent
from approvals.models import ConfirmationRequest
from approvals.eligibility import approver_eligibility
from approvals.selectors import count_decidable_by, requests_decidable_by
from tests.tools.support import REFUND_ORDER
from tools.catalog.models import Refund
from tools.models import Tool

Status = ConfirmationRequest.Status


def _refund(requester) -> uuid.UUID:
    outcome = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because it arrived broken")
    [pending] = outcome.pending
    assert pending.needs == "approvers"
    return uuid.UUID(pending.confirmation_id)


def _codes(request_id) -> dict[str, str]:
    request = ConfirmationRequest.objects.select_related("tool", "user").get(pk=request_id)
    shown = approver_eligibility(request)
    return {**{e["username"]: "" for e in shown["eligible"]}, **{i["username"]: i["code"] for i in shown["ineligible"]}}


def test_standing_granted_after_the_request_does_not_count(requester, approver1, nobody):
    # given: a request, then approve_tool granted to nobody (at a shell: no second person needed)
    request_id = _refund(requester)
    assign_perm("tools.approve_tool", nobody, Tool.objects.get(name="refund_order"))
    late = User.objects.get(pk=nobody.pk)

    # then: the late approver does not see it, cannot decide it, and is named with the reason
    assert not requests_decidable_by(user=late).filter(pk=request_id).exists()
    assert count_decidable_by(user=late) == 0
    with pytest.raises(ApproverNotIndependent) as refused:
        approver_actions.confirmation_approve(request_id=request_id, approver=late)
    assert refused.value.code == "APPROVER_NOT_INDEPENDENT" and "after the request" in refused.value.message
    assert _codes(request_id) == {"acme-approver1": "", "acme-approver2": "", "acme-nobody": "GRANTED_AFTER_REQUEST",
                                  "acme-requester": "REQUESTER"}
    # and a request made after the grant is theirs to decide
    newer = _refund(requester)
    assert requests_decidable_by(user=late).filter(pk=newer).exists()
    approver_actions.confirmation_approve(request_id=newer, approver=late)


def test_the_requester_never_counts_even_holding_approve_tool(requester, approver1):
    assign_perm("tools.approve_tool", requester, Tool.objects.get(name="refund_order"))
    request_id = _refund(requester)
    with pytest.raises(ApprovalForbidden):
        approver_actions.confirmation_approve(request_id=request_id, approver=User.objects.get(pk=requester.pk))
    assert _codes(request_id)["acme-requester"] == "REQUESTER"


def test_standing_without_provenance_counts_as_held_since_the_beginning(requester, approver1):
    StandingSource.objects.all().delete()  # a deployment from before the record
    request_id = _refund(requester)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    assert _codes(request_id)["acme-approver2"] == ""


def test_a_counted_approval_is_checked_again_at_consume(requester, approver1, approver2,
                                                       django_capture_on_commit_callbacks):
    # given: approver1 approved; then approver1's membership is renewed (standing now begins later)
    request_id = _refund(requester)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    approvers = Group.objects.get(name="acme-approvers")
    approver1.groups.remove(approvers)
    approver1.groups.add(approvers)  # at a shell: effective now, after the request

    # when: approver2 reaches the quorum and the run resumes
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request_id, approver=approver2)

    # then: approver1's approval no longer counts: nothing paid, the call waits again, and why
    assert not Refund.objects.exists()
    request = ConfirmationRequest.objects.get(pk=request_id)
    assert request.status == Status.PENDING
    assert "independent" in request.decision_reason
    assert Run.objects.get(pk=request.run_id).status == Run.Status.AWAITING_CONFIRMATION
