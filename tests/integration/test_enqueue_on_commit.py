"""A decision enqueues its run's resume only when its transaction commits."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from approvals.signals import confirmation_settled

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ORDER = "A202607290001"


class Injected(Exception):
    pass


def test_a_decision_whose_transaction_rolls_back_enqueues_nothing(broker, requester):
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer called")
    [pending] = outcome.pending

    # when: the confirmation fails after the runtime was told (its receiver ran first) but before commit
    def fail_after_the_runtime_heard(sender, **kwargs) -> None:
        raise Injected("the decision's transaction fails after settling")

    confirmation_settled.connect(fail_after_the_runtime_heard, dispatch_uid="test-fail-after-settle")
    try:
        with pytest.raises(Injected):
            requester_actions.confirmation_confirm(token=pending.token, user=requester)
    finally:
        confirmation_settled.disconnect(dispatch_uid="test-fail-after-settle")

    # then: the decision is gone and the broker received nothing
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == ConfirmationRequest.Status.PENDING
    assert broker.queued() == []

    # and when the same decision commits, exactly one resume of that run is enqueued
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    [message] = broker.queued()
    assert message["task"] == "runtime.resume_run" and str(outcome.run.pk) in message["args"]
