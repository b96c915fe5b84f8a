"""A run's writes are fenced by its lease: once recovery took the run over, the old holder's save
raises RunClaimLost instead of overwriting the new holder's state (agentplatform.runtime.loop._save)."""
from __future__ import annotations

import datetime

import pytest

from agentplatform import clock
from agentplatform.runtime import loop, services
from agentplatform.runtime.models import Run
from approvals import services as approvals
from tests.tools.support import ORDER, resume_not_enqueued


def test_the_old_holder_cannot_save_after_a_takeover(requester):
    # given: a waiting run, confirmed and claimed by this process
    outcome = services.chat_send(user=requester, message=f"Please cancel order {ORDER} because it was a mistake")
    [pending] = outcome.pending
    with resume_not_enqueued():
        approvals.confirmation_confirm(token=pending.token, user=requester)
    claimed = loop._claim(outcome.run.pk)
    assert claimed is not None
    run = claimed.run
    run.state["note"] = "mine"
    loop._save(run, "state")  # the holder saves and renews its lease

    # when: another worker recovers the run (a new lease), then the old holder saves again
    Run.objects.filter(pk=run.pk).update(lease_expires_at=clock.now() + datetime.timedelta(seconds=999))
    run.state["note"] = "stale"

    # then: refused, and the stored state is the one before the takeover
    with pytest.raises(loop.RunClaimLost):
        loop._save(run, "state")
    assert Run.objects.get(pk=run.pk).state["note"] == "mine"
