"""A call that may have run without an answer (OUTCOME_UNKNOWN: a remote tool reached, no reply)
keeps counting under its limits, proposed directly or consumed after a decision: releasing it let
the next call past the cap while the first may have moved the money. A clean business failure is
still released."""
from __future__ import annotations

from typing import Any

import pytest

from approvals import requester_actions
from policies import selectors
from policies.models import LimitUsage
from tests.policies.support import apply
from tests.policies.test_limits import Payout, bundle, consume, limit, pay
from tools.errors import ToolBusinessError
from tools.registry import ToolSpec

pytestmark = pytest.mark.django_db


def _silent(ctx, params: Payout) -> dict[str, Any]:
    if params.fail:
        raise ToolBusinessError("the account is closed", code="ACCOUNT_CLOSED")
    raise ToolBusinessError("the bank took the request and never answered; it may have paid",
                            code="OUTCOME_UNKNOWN")


SILENT = ToolSpec(name="test_payout_silent", description="Pays, may not answer (test tool).", parameters=Payout,
                  execute=_silent, risk="LOW")
SILENT_CONFIRM = ToolSpec(name="test_payout_silent_confirm", description="Same, after confirming (test tool).",
                          parameters=Payout, execute=_silent, risk="LOW", policy="REQUESTER")


@pytest.fixture(autouse=True)
def _fresh_bundles():
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


@pytest.fixture
def silent(install_tool, requester):
    install_tool(SILENT, users=[requester])
    install_tool(SILENT_CONFIRM, users=[requester])


def test_a_direct_call_with_an_unknown_outcome_still_counts(requester, silent):
    apply(requester.tenant_id, bundle(limit(tool="test_payout_silent", max_count=1)))
    first = pay(requester, tool="test_payout_silent")
    assert first.result.code == "OUTCOME_UNKNOWN"
    assert LimitUsage.objects.get(limit_id="payouts-per-account").released is False
    second = pay(requester, tool="test_payout_silent", call_id="call_2")
    assert second.result.code == "LIMIT_EXCEEDED"


def test_a_direct_call_refused_by_the_business_is_released(requester, silent):
    apply(requester.tenant_id, bundle(limit(tool="test_payout_silent", max_count=1)))
    assert pay(requester, tool="test_payout_silent", fail=True).result.code == "ACCOUNT_CLOSED"
    assert LimitUsage.objects.get(limit_id="payouts-per-account").released is True
    assert pay(requester, tool="test_payout_silent", call_id="call_2").result.code == "OUTCOME_UNKNOWN"


def test_a_consumed_call_with_an_unknown_outcome_still_counts(requester, silent):
    apply(requester.tenant_id, bundle(limit(tool="test_payout_silent_confirm", max_count=1)))
    first = pay(requester, tool="test_payout_silent_confirm")
    requester_actions.confirmation_confirm(token=first.pending.token, user=requester)
    ran = consume(requester, first.pending, {"account": "ACC-1", "amount": "100"}, "test_payout_silent_confirm")
    assert ran.result.code == "OUTCOME_UNKNOWN"
    assert LimitUsage.objects.get(limit_id="payouts-per-account").released is False
    assert pay(requester, tool="test_payout_silent_confirm", call_id="call_2").result.code == "LIMIT_EXCEEDED"
