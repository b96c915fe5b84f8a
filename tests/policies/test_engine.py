"""The Cedar side of policy bundles, judged in process: the schema generated from a tool's
parameter model, the validator refusing what does not fit it (naming the rule), how a verdict is
read (the strongest gate wins, a forbid beats every permit) and failing closed when a rule cannot
be evaluated. The last tests run calls through the pipeline: a tenant's rule only tightens, and a
full refund (no amount) is judged with the amount it would refund."""
from __future__ import annotations

import textwrap
from decimal import Decimal
from typing import Literal

import pytest
from pydantic import BaseModel

from approvals.models import ConfirmationRequest
from policies import selectors
from policies.catalog import CatalogEntry, cedar_schema
from policies.compiler import compile_bundle
from policies.documents import read_bundle
from policies.engine import evaluate_rules
from policies.errors import BundleInvalid
from tests.policies.support import EXAMPLE, apply, call
from tests.tools.support import REFUND_ORDER
from tools.catalog.models import Order, Refund
from tools.models import Tool
from tools.policy_catalog import catalog_entry
from tools.registry import registry


class Pay(BaseModel):
    """A payment tool's parameters: every kind of argument the schema types."""

    account: str
    amount: Decimal | None = None  # money, optional, filled for policy (like a full refund)
    fee: Decimal | None = None  # money, optional, never filled
    count: int
    note: str | None = None
    urgent: bool = False
    channel: Literal["bank", "card"] = "bank"
    tags: list[str] = []


PAY = CatalogEntry(name="pay", json_schema=Pay.model_json_schema(), decimals=frozenset({"amount", "fee"}),
                   fills=frozenset({"amount"}))
CATALOG = {"pay": PAY}


def bundle(cedar: str):
    """`cedar` compiled against CATALOG (raises BundleInvalid)."""
    text = "version: 1\ncedar: |\n" + textwrap.indent(textwrap.dedent(cedar), "  ")
    return compile_bundle(read_bundle(text.encode()), CATALOG, version=1)


def judge(compiled, **arguments):
    """The verdict on a call of `pay` with `arguments` over the parameter model's defaults (as a
    validated call carries them)."""
    defaults = {"account": "x", "count": 1, "urgent": False, "channel": "bank", "tags": []}
    return evaluate_rules(compiled, PAY, {**defaults, **arguments}, username="alice", risk="LOW")


@pytest.fixture(autouse=True)
def _no_compiled_bundles_from_other_tests():
    """Compiled bundles are cached per (tenant, version, row id); SQLite hands a rolled-back row's
    id out again, so a bundle of an earlier test could be taken for this test's."""
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


# -- the generated schema -------------------------------------------------------------------------

def test_the_schema_types_money_as_decimal_and_marks_what_is_optional():
    [action] = cedar_schema(CATALOG)[""]["actions"].values()
    arguments = action["appliesTo"]["context"]["attributes"]["arguments"]["attributes"]
    assert arguments["amount"] == {"type": "Extension", "name": "decimal", "required": True}  # filled
    assert arguments["fee"] == {"type": "Extension", "name": "decimal", "required": False}  # optional
    assert arguments["account"] == {"type": "String", "required": True}
    assert arguments["count"] == {"type": "Long", "required": True}
    assert arguments["note"] == {"type": "String", "required": False}
    assert arguments["channel"]["type"] == "String" and arguments["urgent"]["type"] == "Boolean"
    assert arguments["tags"]["type"] == "Set" and arguments["tags"]["element"] == {"type": "String"}


def test_refund_orders_amount_is_decimal_and_always_there_for_policy():
    entry = catalog_entry(registry.get("refund_order"))
    [action] = cedar_schema({"refund_order": entry})[""]["actions"].values()
    arguments = action["appliesTo"]["context"]["attributes"]["arguments"]["attributes"]
    assert arguments["amount"] == {"type": "Extension", "name": "decimal", "required": True}
    assert arguments["order_id"] == {"type": "String", "required": True}
    assert arguments["reason"] == {"type": "String", "required": True}


# -- the validator ----------------------------------------------------------------------------------

def test_a_misspelt_argument_is_refused_naming_the_rule():
    with pytest.raises(BundleInvalid) as refused:
        bundle('''\
            @id("big-payments") @gate("approval") @quorum("2")
            permit (principal, action == Action::"pay", resource)
            when { context.arguments.amuont.greaterThan(decimal("500.00")) };
            ''')
    [error] = refused.value.errors
    assert error["where"] == "policy big-payments"
    assert "amuont" in error["message"]


def test_a_money_argument_compared_as_a_number_is_refused():
    with pytest.raises(BundleInvalid) as refused:
        bundle('''\
            @id("wrong-type") @gate("confirm")
            permit (principal, action == Action::"pay", resource) when { context.arguments.amount > 500 };
            ''')
    assert [e["where"] for e in refused.value.errors] == ["policy wrong-type"]


def test_an_optional_argument_needs_a_has_guard_a_filled_one_does_not():
    with pytest.raises(BundleInvalid) as refused:
        bundle('''\
            @id("fee-unguarded") @gate("confirm")
            permit (principal, action == Action::"pay", resource)
            when { context.arguments.fee.greaterThan(decimal("1.00")) };
            ''')
    assert refused.value.errors[0]["where"] == "policy fee-unguarded"
    compiled = bundle('''\
        @id("fee-guarded") @gate("confirm")
        permit (principal, action == Action::"pay", resource)
        when { context.arguments has fee && context.arguments.fee.greaterThan(decimal("1.00")) };

        @id("amount-filled") @gate("approval") @quorum("2")
        permit (principal, action == Action::"pay", resource)
        when { context.arguments.amount.greaterThan(decimal("100.00")) };
        ''')
    assert judge(compiled, amount="1").gate == ""  # no fee: the guarded rule is simply not satisfied
    assert (judge(compiled, amount="1", fee="2").gate, judge(compiled, amount="1", fee="2").rules) == (
        "confirm", ("fee-guarded",))


def test_every_problem_is_listed_with_its_rule():
    with pytest.raises(BundleInvalid) as refused:
        bundle('''\
            @id("one") @gate("confirm")
            permit (principal, action == Action::"pay", resource) when { context.arguments.acount == "x" };

            @id("two") @gate("sometimes")
            permit (principal, action == Action::"pay", resource);

            @id("three")
            forbid (principal, action == Action::"pya", resource);
            ''')
    assert {e["where"] for e in refused.value.errors} == {"policy one", "policy two", "policy three"}


# -- reading a verdict ------------------------------------------------------------------------------

STRENGTHS = '''\
    @id("confirm-over-10") @gate("confirm")
    permit (principal, action == Action::"pay", resource)
    when { context.arguments.amount.greaterThan(decimal("10.00")) };

    @id("two-over-100") @gate("approval") @quorum("2")
    permit (principal, action == Action::"pay", resource)
    when { context.arguments.amount.greaterThan(decimal("100.00")) };

    @id("three-when-urgent") @gate("approval") @quorum("3")
    permit (principal, action == Action::"pay", resource)
    when { context.arguments.urgent };

    @id("no-card-over-1000") @reason("Card payments over 1,000 go through the bank")
    forbid (principal, action == Action::"pay", resource)
    when { context.arguments.channel == "card" && context.arguments.amount.greaterThan(decimal("1000.00")) };
    '''


def test_no_rule_satisfied_leaves_the_gate_alone():
    verdict = judge(bundle(STRENGTHS), amount="5.00")
    assert (verdict.denied, verdict.gate, verdict.rules) == (False, "", ())


def test_the_strongest_gate_wins():
    compiled = bundle(STRENGTHS)
    confirm = judge(compiled, amount="50.00")
    assert (confirm.gate, confirm.quorum, confirm.rules) == ("confirm", 1, ("confirm-over-10",))
    approval = judge(compiled, amount="500.00")  # confirm and approval(2) both hold: approval wins
    assert (approval.gate, approval.quorum, approval.rules) == ("approval", 2, ("two-over-100",))
    highest = judge(compiled, amount="500.00", urgent=True)  # two approval rules: the highest quorum
    assert (highest.gate, highest.quorum, highest.rules) == ("approval", 3, ("three-when-urgent",))


def test_a_forbid_beats_every_permit_and_its_reason_is_what_people_read():
    verdict = judge(bundle(STRENGTHS), amount="1000.01", channel="card", urgent=True)
    assert (verdict.denied, verdict.code, verdict.rules) == (True, "POLICY_DENIED", ("no-card-over-1000",))
    assert verdict.reason == "Card payments over 1,000 go through the bank"
    assert not judge(bundle(STRENGTHS), amount="1000.00", channel="card").denied  # greaterThan, not >=


def test_decimals_compare_exactly():
    compiled = bundle(STRENGTHS)
    assert judge(compiled, amount="100.00").gate == "confirm"
    assert judge(compiled, amount=Decimal("100.0001")).gate == "approval"
    assert judge(compiled, amount="1e2").gate == "confirm"  # 1e2 is 100


# -- failing closed ---------------------------------------------------------------------------------

OVERFLOW = '''\
    @id("count-overflows") @reason("never read: the rule errors first")
    forbid (principal, action == Action::"pay", resource)
    when { context.arguments.count + 9223372036854775807 < 0 };
    '''


def test_a_forbid_that_errors_denies_with_policy_error_naming_the_rule():
    verdict = judge(bundle(OVERFLOW), amount="1.00", count=1)
    assert (verdict.denied, verdict.code, verdict.rules) == (True, "POLICY_ERROR", ("count-overflows",))
    assert "count-overflows" in verdict.reason
    assert not judge(bundle(OVERFLOW), amount="1.00", count=-5).denied  # the same rule, no overflow


def test_a_permit_that_errors_denies_too():
    compiled = bundle('''\
        @id("permit-overflows") @gate("confirm")
        permit (principal, action == Action::"pay", resource)
        when { context.arguments.count * 4611686018427387904 > 0 };
        ''')
    verdict = judge(compiled, amount="1.00", count=4)
    assert (verdict.denied, verdict.code, verdict.rules) == (True, "POLICY_ERROR", ("permit-overflows",))


@pytest.mark.parametrize("arguments", [
    {"amount": "922337203685478"},  # beyond Cedar's decimal range
    {"amount": "-922337203685478"},
    {"amount": "1.00", "count": 2 ** 63},  # beyond a 64-bit Long
    {"amount": "1.00", "count": -(2 ** 63) - 1},
    {"amount": "NaN"},
    {"amount": "1.00", "fee": "Infinity"},
])
def test_an_argument_cedar_cannot_hold_is_refused_not_judged_without_it(arguments):
    verdict = judge(bundle(STRENGTHS), **arguments)
    assert (verdict.denied, verdict.code) == (True, "POLICY_ERROR")
    assert "cannot judge" in verdict.reason


def test_the_edges_of_cedars_range_are_judged():
    compiled = bundle(STRENGTHS)
    assert judge(compiled, amount="922337203685477.5807").gate == "approval"
    assert not judge(compiled, amount="1.00", count=2 ** 63 - 1).denied


# -- through the pipeline ---------------------------------------------------------------------------

def _refund_needs_the_requester_only(policy: str = "REQUESTER") -> None:
    """As a platform operator does it: refund_order below its CRITICAL floor (risk HIGH, `policy`),
    with a written waiver."""
    tool = Tool.objects.get(name="refund_order")
    tool.risk_override, tool.policy_override = "HIGH", policy
    tool.critical_floor_waiver = "Tests: rules on the amount decide."
    tool.save()  # saved (not updated): audited, and the cached catalog of offered tools is dropped


CONFIRM_OR_TWO = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("refunds-need-confirmation") @gate("confirm")
      permit (principal, action == Action::"refund_order", resource);

      @id("refunds-over-100-need-two") @gate("approval") @quorum("2")
      permit (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("100.00")) };
    ''')


@pytest.mark.django_db
def test_in_the_pipeline_a_small_refund_is_confirmed_a_large_one_needs_two_approvers(requester):
    _refund_needs_the_requester_only("NONE")  # ungated by the registry: the rules set both gates
    applied = apply(requester.tenant_id, CONFIRM_OR_TWO)

    small = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"})
    large = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "100.01", "reason": "damaged"})

    assert (small.pending.needs, small.pending.quorum, bool(small.pending.token)) == ("requester", 1, True)
    assert (large.pending.needs, large.pending.quorum, large.pending.token) == ("approvers", 2, None)
    requests = {r.quorum: r for r in ConfirmationRequest.objects.filter(tool_name="refund_order")}
    assert (requests[1].policy_version, requests[1].policy_rules) == (applied.version, ["refunds-need-confirmation"])
    assert requests[2].policy_rules == ["refunds-over-100-need-two"]


@pytest.mark.django_db
def test_a_tenants_rule_never_loosens_the_registry_gate(requester):
    # refund_order is CRITICAL: two approvers, whatever a confirm rule says
    apply(requester.tenant_id, CONFIRM_OR_TWO)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"})
    assert (outcome.pending.needs, outcome.pending.quorum) == ("approvers", 2)
    assert ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id).policy_rules is None


@pytest.mark.django_db
def test_a_full_refund_is_judged_with_the_amount_it_would_refund(requester):
    _refund_needs_the_requester_only()
    apply(requester.tenant_id, EXAMPLE)
    order = Order.objects.get(tenant_id=requester.tenant_id, order_id=REFUND_ORDER)
    assert order.amount > Decimal("500.00") and not Refund.objects.filter(order=order).exists()

    # no amount: the rule over 500 still applies (the order's refundable remainder is filled in)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "reason": "damaged"})

    assert (outcome.pending.needs, outcome.pending.quorum) == ("approvers", 3)
    request = ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)
    assert request.policy_rules == ["refunds-over-500-need-three"]
    assert request.arguments["amount"] is None  # what runs is still a full refund


@pytest.mark.django_db
def test_omitting_the_amount_does_not_slip_under_a_forbid(requester):
    _refund_needs_the_requester_only()
    apply(requester.tenant_id, textwrap.dedent('''\
        version: 1
        cedar: |
          @id("no-refund-over-100") @reason("Refunds over 100 go to finance")
          forbid (principal, action == Action::"refund_order", resource)
          when { context.arguments.amount.greaterThan(decimal("100.00")) };
        '''))

    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "reason": "damaged"})

    assert outcome.pending is None and outcome.result.code == "POLICY_DENIED"
    assert outcome.result.message == "Refunds over 100 go to finance"
    assert outcome.result.data == {"rules": ["no-refund-over-100"]}
    small = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "100.00", "reason": "damaged"})
    assert small.pending is not None and small.pending.needs == "requester"


@pytest.mark.django_db
def test_the_largest_amount_the_schema_allows_is_judged_and_forbidden(requester):
    _refund_needs_the_requester_only()
    apply(requester.tenant_id, EXAMPLE)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "9999999999.99",
                                               "reason": "damaged"})
    # the parameter model caps money at 12 digits, well inside Cedar's decimal: it is judged
    assert outcome.pending is None and outcome.result.code == "POLICY_DENIED"


class Ship(BaseModel):
    """A second tool's parameters."""

    parcel: str


SHIP = CatalogEntry(name="ship", json_schema=Ship.model_json_schema())


def test_a_call_is_judged_by_every_rule_that_can_apply_to_its_tool_and_no_other():
    text = textwrap.dedent('''\
        version: 1
        cedar: |
          @id("never-ship") @reason("Shipping is closed")
          forbid (principal, action == Action::"ship", resource);

          @id("pay-or-ship-three") @gate("approval") @quorum("3")
          permit (principal, action in [Action::"pay", Action::"ship"], resource)
          when { context.risk == "HIGH" };

          @id("anything-high-confirms") @gate("confirm")
          permit (principal, action, resource) when { context.risk == "HIGH" };

          @id("ship-overflows") @reason("never read")
          forbid (principal, action == Action::"ship", resource)
          when { 9223372036854775807 + 1 > 0 };
        ''')
    compiled = compile_bundle(read_bundle(text.encode()), {"pay": PAY, "ship": SHIP}, version=1)
    pay = {"account": "x", "count": 1, "urgent": False, "channel": "bank", "tags": []}

    low = evaluate_rules(compiled, PAY, pay, username="alice", risk="LOW")
    high = evaluate_rules(compiled, PAY, pay, username="alice", risk="HIGH")
    ship = evaluate_rules(compiled, SHIP, {"parcel": "p"}, username="alice", risk="HIGH")

    assert (low.denied, low.gate) == (False, "")  # ship's erroring rule never touches a payment
    assert (high.gate, high.quorum, high.rules) == ("approval", 3, ("pay-or-ship-three",))
    assert (ship.denied, ship.code, ship.rules) == (True, "POLICY_ERROR", ("ship-overflows",))
    only_ship = compile_bundle(read_bundle(b'version: 1\ncedar: |\n  @id("never-ship")\n  forbid (principal, '
                                           b'action == Action::"ship", resource);\n'), {"pay": PAY, "ship": SHIP})
    assert not evaluate_rules(only_ship, PAY, pay, username="alice", risk="HIGH").denied  # no rule for pay
    assert evaluate_rules(only_ship, SHIP, {"parcel": "p"}, username="alice", risk="LOW").rules == ("never-ship",)
    beyond = evaluate_rules(only_ship, PAY, {**pay, "count": 2 ** 64}, username="alice", risk="LOW")
    assert (beyond.denied, beyond.code) == (True, "POLICY_ERROR")  # still refused, never judged without it
