"""Concurrent proposals never split a limit's cap: real threads, each with its own PostgreSQL
connection, lined up on a barrier (tests.tools.support.race). The limit's keys are locked with a
transaction-level advisory lock before they are counted, and the call's reservation is written in
the same transaction (policies.limits)."""
from __future__ import annotations

from collections import Counter

import pytest

from agentplatform.tenancy.models import User
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from policies import selectors
from policies.models import LimitUsage
from tests.policies.support import apply
from tests.policies.test_limits import PAYOUT, PAYOUT_CONFIRM, bundle, limit
from tests.tools.support import race, tool_context
from tools.manager import ToolCallingManager
from tests.tools.support import assistant

pytestmark = pytest.mark.postgres

THREADS = 10


@pytest.fixture(autouse=True)
def _fresh_bundles():
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


def _propose_all(requester, tool: str, amount: str) -> list:
    import json
    import uuid

    def prepare(index: int):
        user = User.objects.select_related("tenant").get(pk=requester.pk)
        return tool_context(user, uuid.uuid4()), assistant(
            (f"call_{index}", tool, json.dumps({"account": "ACC-1", "amount": amount})))

    return race(THREADS, prepare,
                lambda state: ToolCallingManager().execute_tool_calls(state[0], state[1]).outcomes[0])


def test_ten_concurrent_payouts_of_120_under_a_300_cap_at_most_two_run_without_approval(
        transactional_db, requester, install_tool):
    # given: a tool that runs without approval, under a sum cap of 300 that asks two approvers
    install_tool(PAYOUT, users=[requester])
    apply(requester.tenant_id, bundle(limit(max_sum={"argument": "amount", "value": "300.00"},
                                            when_exceeded="approval", quorum=2)))

    # when: ten payouts of 120 of the same account are proposed at once
    outcomes = _propose_all(requester, "test_payout", "120")

    # then: two ran (240), the other eight wait for two approvers; the ledger agrees
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    ran = [o for o in outcomes if o.pending is None]
    assert len(ran) == 2 and all(o.result.success for o in ran), [o.result for o in ran]
    waiting = [o for o in outcomes if o.pending is not None]
    assert len(waiting) == 8 and {o.pending.quorum for o in waiting} == {2}
    assert AuditEvent.objects.filter(tool_name="test_payout", decision="EXECUTED").count() == 2
    requests = ConfirmationRequest.objects.filter(tool_name="test_payout")
    assert {(r.policy, r.quorum, tuple(r.policy_rules)) for r in requests} == {
        ("APPROVERS", 2, ("payouts-per-account",))}
    usage = LimitUsage.objects.filter(limit_id="payouts-per-account", key="acc-1")  # folded
    assert usage.count() == 10 and usage.filter(confirmation__isnull=True).count() == 2


def test_ten_concurrent_payouts_under_a_deny_cap_exactly_the_allowed_number_run(
        transactional_db, requester, install_tool):
    install_tool(PAYOUT, users=[requester])
    apply(requester.tenant_id, bundle(limit(max_sum={"argument": "amount", "value": "300.00"})))

    outcomes = _propose_all(requester, "test_payout", "120")

    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert Counter(o.result.code for o in outcomes) == {"OK": 2, "LIMIT_EXCEEDED": 8}
    assert AuditEvent.objects.filter(tool_name="test_payout", decision="EXECUTED").count() == 2
    assert LimitUsage.objects.filter(limit_id="payouts-per-account").count() == 2


def test_ten_concurrent_gated_proposals_under_a_count_cap_create_exactly_the_allowed_requests(
        transactional_db, requester, install_tool):
    # given: a tool the requester confirms, at most 3 calls an hour per account
    install_tool(PAYOUT_CONFIRM, users=[requester])
    apply(requester.tenant_id, bundle(limit(tool="test_payout_confirm", max_count=3)))

    outcomes = _propose_all(requester, "test_payout_confirm", "10")

    # then: three requests wait for their requester; seven were denied, asking nobody
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert Counter(o.result.code for o in outcomes) == {"CONFIRMATION_REQUIRED": 3, "LIMIT_EXCEEDED": 7}
    assert ConfirmationRequest.objects.filter(tool_name="test_payout_confirm").count() == 3
    assert LimitUsage.objects.filter(limit_id="payouts-per-account", confirmation__isnull=False).count() == 3
