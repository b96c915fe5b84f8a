"""A limit's key written differently for the same value: case, surrounding whitespace and
full-width letters never split a per-argument cap, one after another (SQLite and PostgreSQL) or at
once in real threads (PostgreSQL: the advisory lock is taken on the folded key). The built-in
order tools refuse such spellings of an order id outright."""
from __future__ import annotations

import json
import uuid

import pytest

from agentplatform.tenancy.models import User
from audit.models import AuditEvent
from policies import selectors
from policies.models import LimitUsage
from tests.policies.support import EXAMPLE, apply, call
from tests.policies.test_limits import PAYOUT, bundle, limit, pay
from tests.tools.support import REFUND_ORDER, assistant, race, tool_context
from tools.manager import ToolCallingManager

SPELLINGS = ["ACC-1", "acc-1", " ACC-1", "ACC-1\t", "ＡＣＣ-1", "Acc-1"]


@pytest.fixture(autouse=True)
def _fresh_bundles():
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


@pytest.mark.django_db
def test_spellings_of_one_account_share_one_count_cap(requester, install_tool):
    install_tool(PAYOUT, users=[requester])
    apply(requester.tenant_id, bundle(limit(max_count=2)))
    outcomes = [pay(requester, account=account, call_id=f"call_{i}") for i, account in enumerate(SPELLINGS)]
    assert [o.result.success for o in outcomes] == [True, True, False, False, False, False]
    assert {o.result.code for o in outcomes[2:]} == {"LIMIT_EXCEEDED"}
    assert "ACC-1" in outcomes[2].result.message  # the message names the call's own spelling
    assert set(LimitUsage.objects.values_list("key", flat=True)) == {"acc-1"}


@pytest.mark.django_db
def test_spellings_of_one_account_share_one_sum_cap(requester, install_tool):
    install_tool(PAYOUT, users=[requester])
    apply(requester.tenant_id, bundle(limit(max_sum={"argument": "amount", "value": "250.00"})))
    assert pay(requester, "200", account="ACC-1", call_id="a").result.success
    assert pay(requester, "60", account="acc-1 ", call_id="b").result.code == "LIMIT_EXCEEDED"


@pytest.mark.django_db
@pytest.mark.parametrize("order", [REFUND_ORDER.lower(), f" {REFUND_ORDER}", f"{REFUND_ORDER} ", f"A0{REFUND_ORDER[1:]}",
                                   "Ａ" + REFUND_ORDER[1:], REFUND_ORDER[:3] + "２" + REFUND_ORDER[4:]])
def test_a_refund_of_an_order_id_spelt_otherwise_is_refused_before_any_rule_or_limit(requester, order):
    apply(requester.tenant_id, EXAMPLE)
    outcome = call(requester, "refund_order", {"order_id": order, "amount": "510", "reason": "x"})
    assert (outcome.pending, outcome.result.code) == (None, "INVALID_ARGUMENTS")
    assert not LimitUsage.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("amount", [510, 510.0, "510", "510.000", " 510 ", "5.1e2", 5.1e2, "0510"])
def test_an_amount_spelt_otherwise_meets_the_same_rule(requester, amount):
    apply(requester.tenant_id, EXAMPLE)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": amount, "reason": "x"})
    assert outcome.pending is not None and outcome.pending.quorum == 3
    assert outcome.result.data["rules"] == ["refunds-over-500-need-three"]


@pytest.mark.postgres
def test_concurrent_spellings_of_one_account_cannot_split_the_cap(transactional_db, requester, install_tool):
    install_tool(PAYOUT, users=[requester])
    apply(requester.tenant_id, bundle(limit(max_count=2)))
    spellings = (SPELLINGS * 2)[:10]

    def prepare(index: int):
        user = User.objects.select_related("tenant").get(pk=requester.pk)
        return tool_context(user, uuid.uuid4()), assistant(
            (f"call_{index}", "test_payout", json.dumps({"account": spellings[index], "amount": "1"})))

    outcomes = race(10, prepare, lambda state: ToolCallingManager().execute_tool_calls(*state).outcomes[0])

    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert sorted(o.result.code or "OK" for o in outcomes if o.result.success) == ["OK", "OK"], outcomes
    assert sum(1 for o in outcomes if o.result.code == "LIMIT_EXCEEDED") == 8
    assert AuditEvent.objects.filter(tool_name="test_payout", decision="EXECUTED").count() == 2
