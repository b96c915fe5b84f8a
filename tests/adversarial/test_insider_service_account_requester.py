"""An administrator who is also an approver asks *through a service account* (whose key an
administrator receives) and then approves that request: requester and approver would be one
person. Whoever may hold a service account's key is its requester for independence
(agentplatform.controlplane.standing; docs/approvals.md, "Eligibility")."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.runtime import services as runtime
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import User
from approvals import independence
from approvals import approver_actions
from approvals.errors import ApproverNotIndependent
from approvals.models import ConfirmationRequest
from tools.models import Tool

REFUND_ORDER = "A202607290003"


@pytest.fixture
def asking_integration(people):
    """acme's service account, allowed to ask for refunds (at a shell)."""
    integration = people["acme"]["integration"]
    assign_perm("tools.use_tool", integration, Tool.objects.get(name="refund_order"))
    integration.user_permissions.add(Permission.objects.get(codename="refund_order", content_type__app_label="catalog"))
    return User.objects.get(pk=integration.pk)


def _refund_by(user) -> ConfirmationRequest:
    outcome = runtime.chat_send(user=user, message=f"refund {REFUND_ORDER} amount 500 because damaged")
    return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)


def test_an_administrator_approver_never_counts_for_a_service_accounts_request(asking_integration, acme_admin,
                                                                                 approver1):
    # given: acme-admin is also an approver of refund_order (standing older than the request)
    assign_perm("tools.approve_tool", acme_admin, Tool.objects.get(name="refund_order"))
    # and it received the integration's key (a tenant administrator may: the account has no human owner)
    api_token_issue(user=asking_integration, actor=acme_admin, name="insider")
    request = _refund_by(asking_integration)

    # when / then: its decision does not count, the real approver's does
    with pytest.raises(ApproverNotIndependent):
        approver_actions.confirmation_approve(request_id=request.pk, approver=User.objects.get(pk=acme_admin.pk))
    assert independence.assess(user=approver1, request=request).eligible
    assert independence.assess(user=User.objects.get(pk=acme_admin.pk), request=request).code == "KEY_HOLDER"
    assert request.pk not in approvals_for(User.objects.get(pk=acme_admin.pk))
    assert request.pk in approvals_for(approver1)


def test_a_former_administrator_who_received_the_key_does_not_count_either(asking_integration, acme_admin, people):
    api_token_issue(user=asking_integration, actor=acme_admin, name="insider")
    with acting_as(people["acme"]["admin2"]):
        demoted = User.objects.get(pk=acme_admin.pk)
        demoted.is_staff = False
        demoted.save()
    assign_perm("tools.approve_tool", demoted, Tool.objects.get(name="refund_order"))
    request = _refund_by(asking_integration)
    assert independence.assess(user=User.objects.get(pk=acme_admin.pk), request=request).code == "KEY_HOLDER"


def approvals_for(user) -> set:
    from approvals.selectors import requests_decidable_by

    return set(requests_decidable_by(user=user).values_list("pk", flat=True))
