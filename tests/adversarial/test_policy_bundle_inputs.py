"""Hostile bundle files: what a tenant administrator can paste is refused with POLICY_BUNDLE_INVALID
(never a server error, never half applied) and the version in force stays."""
from __future__ import annotations

import os

import textwrap

import pytest
import yaml

from policies.errors import BundleInvalid
from policies.models import PolicyBundle
from tests.policies.support import EXAMPLE, apply

pytestmark = pytest.mark.django_db


def _cedar(text: str) -> str:
    return "version: 1\ncedar: |\n" + textwrap.indent(textwrap.dedent(text), "  ")


def _refused(tenant_id: int, text: str) -> list[dict[str, str]]:
    before = list(PolicyBundle.objects.filter(tenant_id=tenant_id).values_list("version", flat=True))
    with pytest.raises(BundleInvalid) as refused:
        apply(tenant_id, text)
    assert refused.value.code == "POLICY_BUNDLE_INVALID"
    assert list(PolicyBundle.objects.filter(tenant_id=tenant_id).values_list("version", flat=True)) == before
    return refused.value.errors


@pytest.mark.parametrize("quorum", ["²", "٢", "02", "2 ", "10", "0"])
def test_a_quorum_that_is_not_one_ascii_digit_is_refused_not_a_crash(requester, quorum):
    # "²".isdigit() is True and int("²") raises: the check once crashed the apply with a ValueError.
    apply(requester.tenant_id, EXAMPLE)
    errors = _refused(requester.tenant_id, _cedar(f'''\
        @id("q") @gate("approval") @quorum("{quorum}")
        permit (principal, action == Action::"refund_order", resource);
        '''))
    assert any("@quorum" in e["message"] for e in errors), errors


@pytest.mark.parametrize("rule_id", ["q\\n", "q\\r", "q\\u{0}", "q\\u{2028}", " q", "q/../x", "ｑ", "q" * 101])
def test_an_id_with_odd_characters_is_refused(requester, rule_id):
    # `^...$` with re.match accepted "q\n": an id that prints as another rule's in logs and audit rows.
    errors = _refused(requester.tenant_id, _cedar(f'''\
        @id("{rule_id}")
        forbid (principal, action == Action::"refund_order", resource);
        '''))
    assert any("@id" in e["message"] for e in errors), errors


def test_a_rule_id_colliding_with_a_limit_id_or_the_baseline_is_refused(requester):
    text = _cedar('''\
        @id("per-order")
        forbid (principal, action == Action::"refund_order", resource);
        @id("baseline")
        forbid (principal, action == Action::"cancel_order", resource);
        ''') + textwrap.dedent('''\
        limits:
          - {id: per-order, tool: refund_order, per: order_id, window_seconds: 60, max_count: 1, when_exceeded: deny}
        ''')
    errors = _refused(requester.tenant_id, text)
    assert {e["where"] for e in errors} >= {"policy per-order", "policy baseline"}


def test_a_duplicate_mode_annotation_cannot_pick_shadow_behind_enforce(requester):
    errors = _refused(requester.tenant_id, _cedar('''\
        @id("q") @mode("enforce") @mode("shadow")
        forbid (principal, action == Action::"refund_order", resource);
        '''))
    assert "duplicate annotation" in str(errors)


@pytest.mark.parametrize("text", [
    "version: 1\ncedar: !!python/object/apply:os.system ['touch /tmp/pwned-by-bundle']\n",
    "version: 1\ncedar: !!python/name:os.system\n",
    "version: 1\ncedar: \"\\0\"\n",
    "version: 1\ncedar: \"@id(\\\"a\\0b\\\") forbid (principal, action, resource);\"\n",
    b"version: 1\ncedar: \"\xff\xfe\"\n",
    "version: 1\n" + "limits: " + "[" * 200 + "]" * 200 + "\n",
    "version: 1\ncedar: |\n  @id(\"x\") permit (principal, action, resource) when { context.risk == \"" + "x" * 300_000 + "\" };\n",
])
def test_hostile_yaml_is_refused(requester, text):
    errors = _refused(requester.tenant_id, text)
    assert errors and all(e["where"] and e["message"] for e in errors), errors
    assert not os.path.exists("/tmp/pwned-by-bundle")  # no YAML tag ever ran code


def test_ten_thousand_policies_are_refused_whatever_the_size_cap(requester, settings):
    settings.POLICY_BUNDLE_MAX_BYTES = 4_000_000
    cedar = "\n".join(f'@id("r{i}") forbid (principal, action == Action::"refund_order", resource);'
                      for i in range(10_000))
    errors = _refused(requester.tenant_id, yaml.safe_dump({"version": 1, "cedar": cedar}))
    assert "at most 500" in str(errors)


def _when(condition: str) -> str:
    return yaml.safe_dump({"version": 1, "cedar": '@id("deep")\nforbid (principal, action == Action::"refund_order", '
                                                  f'resource)\nwhen {{ {condition} }};\n'})


@pytest.mark.parametrize("condition", [
    "(" * 1000 + "true" + ")" * 1000,  # Cedar's parser overflowed the native stack: the process died (SIGSEGV)
    "[" * 1000 + "1" + "]" * 1000 + " == []",
    "{a:" * 1000 + "1" + "}" * 1000 + " == {}",
    "if true then " * 5000 + "true" + " else false" * 5000,
    " && ".join(["true"] * 20000),
    "context" + ".a" * 20000 + " == 1",
])
def test_a_condition_nested_or_chained_past_what_cedar_survives_is_refused_before_cedar_reads_it(requester,
                                                                                                 condition):
    errors = _refused(requester.tenant_id, _when(condition))
    assert errors[0]["where"].startswith("cedar (line") and ("nested" in errors[0]["message"]
                                                            or "more than" in errors[0]["message"]), errors


def test_a_stored_bundle_too_deep_is_refused_not_evaluated(requester):
    from policies.compiler import compile_stored

    with pytest.raises(BundleInvalid):
        compile_stored(version=1, cedar='@id("d") forbid (principal, action, resource) when { ' + "(" * 1000
                       + "true" + ")" * 1000 + " };", limits=[])


def test_nesting_and_operators_within_the_caps_still_apply(requester):
    condition = "(" * 60 + " && ".join(['context.arguments.amount.greaterThan(decimal("1.00"))'] * 20) + ")" * 60
    assert apply(requester.tenant_id, _when(condition)).version == 1


@pytest.mark.parametrize("chain", [150, 1500])
def test_a_long_chain_cedar_cannot_store_is_refused_naming_the_rule_not_a_server_error(requester, chain):
    # Cedar reads its JSON form with a nesting limit: a chain of 150 `||` once raised a bare ValueError.
    errors = _refused(requester.tenant_id, _when(" || ".join(
        [f'context.arguments.order_id == "A2026072900{i:02d}"' for i in range(chain)])))
    where, message = errors[0]["where"], errors[0]["message"]
    assert (where, "deep" in message) == ("policy deep", True) or (where.startswith("cedar") and "split" in message)
