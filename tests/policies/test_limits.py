"""Limits over history: per tool and per key, over a sliding window, counting calls that ran and
calls whose request may still run; deny or raise the gate when exceeded; shadow limits recorded,
never enforced; judged again at consume time. Runs on SQLite and on PostgreSQL."""
from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
import yaml
from guardian.shortcuts import assign_perm
from pydantic import BaseModel, ConfigDict

from approvals import approver_actions, requester_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from core import clock
from policies.limits import limits_judge
from policies.models import LimitUsage, ShadowVerdict
from policies import selectors
from policies.selectors import bundle_in_force
from tests.policies.support import apply, call
from tests.tools.support import REFUND_ORDER, tool_context
from tools.catalog import services as catalog_services
from tools.errors import ToolBusinessError
from tools.manager import ToolCallingManager
from tools.registry import ToolSpec
from tests.tools.support import assistant

pytestmark = pytest.mark.django_db

Status = ConfirmationRequest.Status


class Payout(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    amount: Decimal
    fail: bool = False


def _payout(ctx, params: Payout) -> dict[str, Any]:
    if params.fail:
        raise ToolBusinessError("the bank refused the payout", code="BANK_REFUSED")
    return {"account": params.account, "amount": str(params.amount)}


# Base gate NONE (LOW): runs at once unless a limit raises it. The _confirm one waits for its requester.
PAYOUT = ToolSpec(name="test_payout", description="Pay out (test tool).", parameters=Payout, execute=_payout,
                  risk="LOW")
PAYOUT_CONFIRM = ToolSpec(name="test_payout_confirm", description="Pay out after confirming (test tool).",
                          parameters=Payout, execute=_payout, risk="LOW", policy="REQUESTER")


def bundle(*limits: dict[str, Any]) -> str:
    return yaml.safe_dump({"version": 1, "cedar": "", "limits": list(limits)})


def limit(**fields: Any) -> dict[str, Any]:
    base = {"id": "payouts-per-account", "tool": "test_payout", "per": "account", "window_seconds": 3600,
            "when_exceeded": "deny"}
    return {**base, **fields}


def pay(user, amount: str = "100", account: str = "ACC-1", *, tool: str = "test_payout", fail: bool = False,
        call_id: str = "call_1"):
    arguments: dict[str, Any] = {"account": account, "amount": amount}
    if fail:
        arguments["fail"] = True
    return call(user, tool, arguments, call_id=call_id)


@pytest.fixture(autouse=True)
def _fresh_bundles():
    # A rolled-back test may leave a compiled bundle cached under an id SQLite hands out again.
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


@pytest.fixture
def payout(install_tool, requester, approver1):
    row = install_tool(PAYOUT, users=[requester, approver1])
    confirm = install_tool(PAYOUT_CONFIRM, users=[requester, approver1])
    for tool in (row, confirm):
        assign_perm("tools.approve_tool", approver1, tool)
    return row


def executed(tool: str = "test_payout") -> int:
    return AuditEvent.objects.filter(tool_name=tool, decision="EXECUTED").count()


def test_a_count_cap_denies_the_call_past_it_in_words_and_keys_by_the_argument(requester, payout):
    apply(requester.tenant_id, bundle(limit(max_count=2, reason="Two payouts an hour per account")))
    assert [pay(requester).result.success for _ in range(2)] == [True, True]

    third = pay(requester)

    assert (third.result.success, third.result.code, third.pending) == (False, "LIMIT_EXCEEDED", None)
    message = third.result.message
    assert "Two payouts an hour per account" in message and "at most 2 call(s)" in message
    assert "1 hour" in message and "ACC-1" in message and "payouts-per-account" in message
    assert third.result.data == {"rules": ["payouts-per-account"]}
    assert executed() == 2
    denied = AuditEvent.objects.get(tool_name="test_payout", decision="DENIED")
    assert denied.policy_rules == ["payouts-per-account"] and denied.status == "LIMIT_EXCEEDED"
    # another account is another key
    assert pay(requester, account="ACC-2").result.success
    assert LimitUsage.objects.filter(limit_id="payouts-per-account", key="acc-1").count() == 2  # keys are folded (limit_key)


def test_a_sum_cap_over_approval_raises_the_gate_to_the_limits_quorum_and_links_the_reservation(requester, payout):
    applied = apply(requester.tenant_id, bundle(limit(max_sum={"argument": "amount", "value": "300.00"},
                                                      when_exceeded="approval", quorum=2)))
    assert pay(requester, "120").result.success and pay(requester, "120").result.success

    third = pay(requester, "120")

    assert third.pending is not None and third.pending.quorum == 2 and executed() == 2
    assert third.result.data["rules"] == ["payouts-per-account"]
    request = ConfirmationRequest.objects.get(pk=third.pending.confirmation_id)
    assert (request.policy, request.quorum, request.policy_version, request.policy_rules) == (
        "APPROVERS", 2, applied.version, ["payouts-per-account"])
    row = LimitUsage.objects.get(confirmation=request)
    assert (row.amount, row.key, row.released) == (Decimal("120"), "acc-1", False)  # folded key
    # the pending request counts: a fourth small payout is over the cap too
    assert pay(requester, "10").pending is not None
    # a payout that fits under what remains runs (sum 240 + 60 = 300 is not over)
    assert pay(requester, "60", account="ACC-2").result.success


def test_per_user_and_per_tenant_keys(requester, approver1, payout):
    apply(requester.tenant_id, bundle(limit(id="per-user", per="user", max_count=1),
                                      limit(id="per-tenant", per="tenant", max_count=3)))
    assert pay(requester, account="A").result.success
    by_user = pay(requester, account="B")
    assert by_user.result.code == "LIMIT_EXCEEDED" and by_user.result.data["rules"] == ["per-user"]
    assert pay(approver1, account="C").result.success  # another user: own key
    assert LimitUsage.objects.filter(limit_id="per-user", key=str(approver1.pk)).count() == 1
    assert LimitUsage.objects.filter(limit_id="per-tenant", key="tenant").count() == 2


def test_the_tenant_key_is_shared_by_every_user(requester, approver1, payout):
    apply(requester.tenant_id, bundle(limit(id="per-tenant", per="tenant", max_count=2)))
    assert pay(requester, account="A").result.success and pay(approver1, account="B").result.success
    third = pay(requester, account="C")
    assert third.result.code == "LIMIT_EXCEEDED" and "for the whole tenant" in third.result.message


def test_the_window_slides(requester, payout, monkeypatch):
    apply(requester.tenant_id, bundle(limit(max_count=1, window_seconds=600)))
    start = clock.now()
    monkeypatch.setattr("core.clock.now", lambda: start)
    assert pay(requester).result.success
    monkeypatch.setattr("core.clock.now", lambda: start + datetime.timedelta(seconds=599))
    assert pay(requester).result.code == "LIMIT_EXCEEDED"
    monkeypatch.setattr("core.clock.now", lambda: start + datetime.timedelta(seconds=601))
    assert pay(requester).result.success


def test_pending_requests_count_until_rejected_or_expired(requester, approver1, payout, monkeypatch):
    apply(requester.tenant_id, bundle(limit(tool="test_payout_confirm", max_count=1)))
    first = pay(requester, tool="test_payout_confirm")
    assert first.pending is not None
    assert pay(requester, tool="test_payout_confirm").result.code == "LIMIT_EXCEEDED"  # pending counts

    requester_actions.confirmation_cancel(token=first.pending.token, user=requester)  # declined: stops counting
    second = pay(requester, tool="test_payout_confirm")
    assert second.pending is not None

    request = ConfirmationRequest.objects.get(pk=second.pending.confirmation_id)
    later = request.expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr("core.clock.now", lambda: later)  # past its deadline, not swept yet: expired
    assert pay(requester, tool="test_payout_confirm").pending is not None


def test_a_rejected_approval_stops_counting(requester, approver1, payout):
    apply(requester.tenant_id, bundle(limit(max_count=1, when_exceeded="approval", quorum=1)))
    assert pay(requester).result.success
    waiting = pay(requester)
    assert waiting.pending is not None
    approver_actions.confirmation_reject(request_id=waiting.pending.confirmation_id, approver=approver1,
                                         reason="no")
    # the ran call still counts (one over the cap asks again); the rejected one does not add to it
    row = LimitUsage.objects.get(confirmation_id=waiting.pending.confirmation_id)
    assert ConfirmationRequest.objects.get(pk=row.confirmation_id).status == Status.CANCELLED
    verdict = limits_judge(tenant_id=requester.tenant_id, user_id=requester.pk, tool_name="test_payout",
                           limits=bundle_in_force(requester.tenant_id).limits_for("test_payout"),
                           arguments={"account": "ACC-1", "amount": "1"})
    assert verdict.judged[0].count == 1


def test_a_failed_direct_call_is_not_counted(requester, payout):
    apply(requester.tenant_id, bundle(limit(max_count=1)))
    failed = pay(requester, fail=True)
    assert (failed.result.success, failed.result.code) == (False, "BANK_REFUSED")
    assert LimitUsage.objects.get(limit_id="payouts-per-account").released is True
    assert pay(requester).result.success
    assert pay(requester).result.code == "LIMIT_EXCEEDED"


def _crash(ctx, params: Payout) -> dict[str, Any]:
    raise RuntimeError("the bank's connection dropped")


def test_a_direct_call_whose_tool_raised_is_not_counted(requester, install_tool):
    install_tool(ToolSpec(name="test_payout_crash", description="Crashes (test tool).", parameters=Payout,
                          execute=_crash, risk="LOW"), users=[requester])
    apply(requester.tenant_id, bundle(limit(tool="test_payout_crash", max_count=1)))
    crashed = pay(requester, tool="test_payout_crash")
    assert crashed.result.code == "TOOL_EXECUTION_FAILED"
    assert LimitUsage.objects.get(limit_id="payouts-per-account").released is True
    assert pay(requester, tool="test_payout_crash").result.code == "TOOL_EXECUTION_FAILED"  # not LIMIT_EXCEEDED


def test_a_shadow_limit_is_recorded_and_never_enforced(requester, payout):
    apply(requester.tenant_id, bundle(limit(id="shadow-cap", max_count=1, mode="shadow"),
                                      limit(id="shadow-sum", max_sum={"argument": "amount", "value": "150"},
                                            when_exceeded="approval", quorum=3, mode="shadow")))
    assert pay(requester).result.success and pay(requester).result.success
    assert executed() == 2
    verdicts = sorted(ShadowVerdict.objects.filter(tool_name="test_payout").values_list("rule_id", "would", "quorum"))
    assert verdicts == [("shadow-cap", "DENY", None), ("shadow-sum", "APPROVAL", 3)]


def test_the_dry_run_writes_nothing_and_names_the_deciding_limit(requester, payout):
    apply(requester.tenant_id, bundle(limit(max_count=1)))
    assert pay(requester).result.success
    limits = bundle_in_force(requester.tenant_id).limits_for("test_payout")
    verdict = limits_judge(tenant_id=requester.tenant_id, user_id=requester.pk, tool_name="test_payout",
                           limits=limits, arguments={"account": "ACC-1", "amount": "5"})
    assert verdict.denied and verdict.code == "LIMIT_EXCEEDED" and verdict.rules == ("payouts-per-account",)
    assert verdict.public()["limits"][0]["counted"] == 1
    assert LimitUsage.objects.count() == 1


def test_a_full_refund_is_counted_with_its_filled_amount(requester):
    remainder = catalog_services.order_refundable(tenant_id=requester.tenant_id, order_id=REFUND_ORDER)
    assert remainder > Decimal("1")
    apply(requester.tenant_id, bundle({"id": "refunds-per-order", "tool": "refund_order", "per": "order_id",
                                       "window_seconds": 86400, "when_exceeded": "approval", "quorum": 3,
                                       "max_sum": {"argument": "amount", "value": str(remainder - 1)}}))

    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "reason": "damaged"})

    assert outcome.pending is not None and outcome.pending.quorum == 3
    row = LimitUsage.objects.get(limit_id="refunds-per-order")
    assert (row.key, row.amount, str(row.confirmation_id)) == (REFUND_ORDER.casefold(), remainder, str(outcome.pending.confirmation_id))


# -- consume time ----------------------------------------------------------------------------------

def consume(user, pending, arguments: dict[str, Any], tool: str):
    import json

    ctx = tool_context(user, pending_conversation(pending), confirmations={"call_1": pending.confirmation_id})
    message = assistant(("call_1", tool, json.dumps(arguments)))
    return ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0]


def pending_conversation(pending):
    return ConfirmationRequest.objects.get(pk=pending.confirmation_id).conversation_id


def test_at_consume_time_its_own_reservation_is_not_counted_twice(requester, payout):
    apply(requester.tenant_id, bundle(limit(tool="test_payout_confirm", max_count=1)))
    first = pay(requester, tool="test_payout_confirm")
    requester_actions.confirmation_confirm(token=first.pending.token, user=requester)

    ran = consume(requester, first.pending, {"account": "ACC-1", "amount": "100"}, "test_payout_confirm")

    assert ran.result.success, ran.result
    request = ConfirmationRequest.objects.get(pk=first.pending.confirmation_id)
    assert request.status == Status.CONSUMED
    assert LimitUsage.objects.filter(confirmation=request, released=False).count() == 1
    assert pay(requester, tool="test_payout_confirm").result.code == "LIMIT_EXCEEDED"  # it still counts


def test_a_limit_tightened_while_the_request_waits_regates_it(requester, approver1, payout):
    apply(requester.tenant_id, bundle(limit(max_count=1, when_exceeded="approval", quorum=1)))
    assert pay(requester).result.success
    waiting = pay(requester)
    approver_actions.confirmation_approve(request_id=waiting.pending.confirmation_id, approver=approver1)
    assert ConfirmationRequest.objects.get(pk=waiting.pending.confirmation_id).status == Status.CONFIRMED
    apply(requester.tenant_id, bundle(limit(max_count=1, when_exceeded="approval", quorum=2)))

    again = consume(requester, waiting.pending, {"account": "ACC-1", "amount": "100"}, "test_payout")

    assert again.pending is not None and again.pending.quorum == 2
    assert "payouts-per-account" in again.result.message
    request = ConfirmationRequest.objects.get(pk=waiting.pending.confirmation_id)
    assert (request.status, request.quorum) == (Status.PENDING, 2)
    assert executed() == 1


def test_a_limit_turned_to_deny_while_the_request_waits_refuses_it(requester, approver1, payout):
    apply(requester.tenant_id, bundle(limit(max_count=1, when_exceeded="approval", quorum=1)))
    assert pay(requester).result.success
    waiting = pay(requester)
    approver_actions.confirmation_approve(request_id=waiting.pending.confirmation_id, approver=approver1)
    apply(requester.tenant_id, bundle(limit(max_count=1)))

    refused = consume(requester, waiting.pending, {"account": "ACC-1", "amount": "100"}, "test_payout")

    assert refused.result.code == "LIMIT_EXCEEDED"
    assert ConfirmationRequest.objects.get(pk=waiting.pending.confirmation_id).status == Status.REFUSED
    assert executed() == 1


def test_an_approved_request_over_an_unchanged_limit_runs(requester, approver1, payout):
    apply(requester.tenant_id, bundle(limit(max_sum={"argument": "amount", "value": "300"},
                                            when_exceeded="approval", quorum=1)))
    assert pay(requester, "200").result.success
    waiting = pay(requester, "200")
    approver_actions.confirmation_approve(request_id=waiting.pending.confirmation_id, approver=approver1)

    ran = consume(requester, waiting.pending, {"account": "ACC-1", "amount": "200"}, "test_payout")

    assert ran.result.success and executed() == 2
    total = sum(LimitUsage.objects.filter(released=False).values_list("amount", flat=True))
    assert total == Decimal("400")


def test_a_limit_added_while_the_request_waits_counts_it_at_consume_time(requester, payout):
    first = pay(requester, tool="test_payout_confirm")
    requester_actions.confirmation_confirm(token=first.pending.token, user=requester)
    apply(requester.tenant_id, bundle(limit(tool="test_payout_confirm", max_count=2)))

    ran = consume(requester, first.pending, {"account": "ACC-1", "amount": "100"}, "test_payout_confirm")

    assert ran.result.success
    row = LimitUsage.objects.get(confirmation_id=first.pending.confirmation_id)
    assert row.limit_id == "payouts-per-account" and not row.released
    assert pay(requester, tool="test_payout_confirm").pending is not None  # the second fits
    assert pay(requester, tool="test_payout_confirm").result.code == "LIMIT_EXCEEDED"


def test_an_amount_an_approver_lowered_is_what_stays_counted_once_it_runs(requester, approver1, approver2):
    from approvals.amendments import confirmation_edit

    apply(requester.tenant_id, bundle({"id": "refunds-per-order", "tool": "refund_order", "per": "order_id",
                                       "window_seconds": 86400, "when_exceeded": "deny",
                                       "max_sum": {"argument": "amount", "value": "1000"}}))
    asked = {"order_id": REFUND_ORDER, "amount": "100.00", "reason": "damaged"}
    waiting = call(requester, "refund_order", asked)
    request = ConfirmationRequest.objects.get(pk=waiting.pending.confirmation_id)
    assert LimitUsage.objects.get(confirmation=request).amount == Decimal("100")
    edited = {**asked, "amount": "40.00"}
    confirmation_edit(request_id=request.pk, editor=approver1, arguments=edited,
                      base_arguments_hash=request.arguments_hash)
    approver_actions.confirmation_approve(request_id=request.pk, approver=approver2,
                                          arguments_hash=ConfirmationRequest.objects.get(pk=request.pk).arguments_hash)

    ran = consume(requester, waiting.pending, edited, "refund_order")

    assert ran.result.success, ran.result
    assert LimitUsage.objects.get(confirmation=request).amount == Decimal("40")
