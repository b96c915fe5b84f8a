"""Hostile bundle files: what a tenant administrator can paste is refused with POLICY_BUNDLE_INVALID
(never a server error, never half applied) and the version in force stays."""
from __future__ import annotations

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
    _refused(requester.tenant_id, text)


def test_ten_thousand_policies_are_refused_whatever_the_size_cap(requester, settings):
    settings.POLICY_BUNDLE_MAX_BYTES = 4_000_000
    cedar = "\n".join(f'@id("r{i}") forbid (principal, action == Action::"refund_order", resource);'
                      for i in range(10_000))
    errors = _refused(requester.tenant_id, yaml.safe_dump({"version": 1, "cedar": cedar}))
    assert "at most 500" in str(errors)
