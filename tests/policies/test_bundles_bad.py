"""Bad bundles get a clear error (where + message) and leave the version in force: Cedar syntax,
unknown tools and arguments, wrong types, inconsistent annotations, duplicate ids, bad limits,
YAML bombs, oversized and non-UTF-8 files, a missing version. JSON is YAML: a valid JSON bundle
applies. A tenant administrator's loosening is proposed, not applied."""
from __future__ import annotations

import json
import textwrap

import pytest

from agentplatform.controlplane.bundles import policy_bundle_apply
from policies.errors import BundleInvalid
from policies.models import PolicyBundle
from policies.selectors import bundle_in_force
from tests.policies.support import EXAMPLE

pytestmark = pytest.mark.django_db


def _cedar(text: str) -> str:
    return "version: 1\ncedar: |\n" + textwrap.indent(textwrap.dedent(text), "  ")


def _limit(**fields) -> str:
    limit = {"id": "l1", "tool": "refund_order", "per": "order_id", "window_seconds": 3600, "max_count": 3,
             "when_exceeded": "deny", **fields}
    return "version: 1\nlimits:\n  - " + json.dumps(limit) + "\n"


BILLION_LAUGHS = textwrap.dedent('''\
    version: 1
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    ''')

CASES = {
    "cedar syntax error": (_cedar('''\
        @id("ok") @gate("confirm")
        permit (principal, action == Action::"refund_order", resource);

        @id("broken") @gate("confirm")
        permit (principal, action == Action::"refund_order", resource)
        when { context.arguments.amount > };
        '''), "policy broken (line 4 of cedar)", "Cedar syntax error"),
    "unknown tool": (_cedar('''\
        @id("r") @gate("confirm")
        permit (principal, action == Action::"refund_ordr", resource);
        '''), "policy r", 'unrecognized action `Action::"refund_ordr"` (no such tool in the catalog)'),
    "misspelt argument": (_cedar('''\
        @id("r") @gate("confirm")
        permit (principal, action == Action::"refund_order", resource)
        when { context.arguments.amuont.greaterThan(decimal("500.00")) };
        '''), "policy r", "`arguments.amuont`"),
    "decimal compared with a string": (_cedar('''\
        @id("r") @gate("confirm")
        permit (principal, action == Action::"refund_order", resource)
        when { context.arguments.amount.greaterThan("500.00") };
        '''), "policy r", "expected decimal but saw String"),
    "permit without @gate": (_cedar('''\
        @id("r")
        permit (principal, action == Action::"refund_order", resource);
        '''), "policy r", 'a permit sets a gate: @gate("confirm") or @gate("approval")'),
    "forbid with @quorum": (_cedar('''\
        @id("r") @quorum("2")
        forbid (principal, action == Action::"refund_order", resource);
        '''), "policy r", "a forbid denies: @gate and @quorum do not apply to it"),
    "duplicate ids": (_cedar('''\
        @id("twice") @gate("confirm")
        permit (principal, action == Action::"refund_order", resource);
        @id("twice") @gate("approval")
        permit (principal, action == Action::"cancel_order", resource);
        '''), "policy twice", "this id is used more than once"),
    "limit on an unknown tool": (_limit(tool="refund_ordr"), "limit l1", "unknown tool 'refund_ordr'"),
    "limit per an unknown argument": (_limit(per="order"), "limit l1.per", "'order' is not `user`, `tenant`"),
    "limit summing an unknown argument": (_limit(max_sum={"argument": "amuont", "value": "300.00"}),
                                          "limit l1.max_sum.argument", "'amuont' is not a numeric argument"),
    "YAML bomb": (BILLION_LAUGHS, "line 2, column 4", "anchors and aliases are not allowed"),
    "deeply nested YAML": ("version: 1\nx: " + "[" * 5000 + "]" * 5000 + "\n", "line 2",
                           "nested more than 50 levels deep"),
    "10 MB file": (b"version: 1\n# " + b"x" * (10 * 1024 * 1024) + b"\n", "file",
                   "at most 262144 are accepted"),
    "non-UTF-8 bytes": (b"version: 1\ncedar: \"caf\xe9\"\n", "file", "not UTF-8 text"),
    "missing version": ('cedar: ""\nlimits: []\n', "version", "is required"),
    "unknown key": ("version: 1\nrules: []\n", "rules", "is not a key of a bundle"),
    "not a mapping": ("- version: 1\n", "file", "must be a mapping"),
}


@pytest.fixture
def in_force(acme_admin):
    """acme with EXAMPLE as version 1; returns the tenant."""
    policy_bundle_apply(tenant=acme_admin.tenant, text=EXAMPLE, actor=acme_admin)
    return acme_admin.tenant


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_bundle_is_refused_with_where_and_why_and_the_version_in_force_stays(name, in_force, acme_admin):
    text, where, message = CASES[name]
    with pytest.raises(BundleInvalid) as raised:
        policy_bundle_apply(tenant=in_force, text=text, actor=acme_admin)
    error = raised.value
    assert error.code == "POLICY_BUNDLE_INVALID"
    assert any(e["where"].startswith(where) and message in e["message"] for e in error.errors), error.errors
    assert list(PolicyBundle.objects.filter(tenant=in_force).values_list("version", flat=True)) == [1]
    assert bundle_in_force(in_force.pk).version == 1
    # a check says the same and stores nothing either
    with pytest.raises(BundleInvalid):
        policy_bundle_apply(tenant=in_force, text=text, actor=acme_admin, check=True)


def test_every_error_of_a_bundle_is_reported_at_once(in_force, acme_admin):
    text = _cedar('''\
        @id("a") @gate("confirm")
        permit (principal, action == Action::"refund_order", resource)
        when { context.arguments.amuont.greaterThan(decimal("1.00")) };
        @id("b")
        permit (principal, action == Action::"refund_order", resource);
        ''') + "limits:\n  - " + json.dumps({"id": "l1", "tool": "nope", "per": "user", "window_seconds": 60,
                                            "max_count": 1, "when_exceeded": "deny"}) + "\n"
    with pytest.raises(BundleInvalid) as raised:
        policy_bundle_apply(tenant=in_force, text=text, actor=acme_admin)
    wheres = sorted(e["where"] for e in raised.value.errors)
    assert wheres == ["limit l1", "policy a", "policy b"]


def test_a_valid_json_bundle_applies(in_force, acme_admin):
    document = {"version": 1, "cedar": textwrap.dedent('''\
        @id("refunds-over-500-need-three")
        @gate("approval") @quorum("3")
        permit (principal, action == Action::"refund_order", resource)
        when { context.arguments.amount.greaterThan(decimal("500.00")) };

        @id("no-refund-over-5000")
        @reason("Refunds over 5,000 are handled by finance, not the assistant")
        forbid (principal, action == Action::"refund_order", resource)
        when { context.arguments.amount.greaterThan(decimal("5000.00")) };

        @id("cancels-confirm")
        @gate("confirm")
        permit (principal, action == Action::"cancel_order", resource);
        '''), "limits": []}
    outcome = policy_bundle_apply(tenant=in_force, text=json.dumps(document), actor=acme_admin)
    assert (outcome.status, outcome.version) == ("applied", 2)
    compiled = bundle_in_force(in_force.pk)
    assert sorted(rule.id for rule in compiled.rules.values()) == [
        "cancels-confirm", "no-refund-over-5000", "refunds-over-500-need-three"]


def test_a_loosening_by_a_tenant_administrator_leaves_the_version_in_force(in_force, acme_admin):
    looser = EXAMPLE.replace('decimal("5000.00")', 'decimal("50000.00")')
    outcome = policy_bundle_apply(tenant=in_force, text=looser, actor=acme_admin)
    assert outcome.code == "POLICY_BUNDLE_LOOSENS" and outcome.change is not None
    assert outcome.loosens == ["rule no-refund-over-5000 (refund_order) changed"]
    assert bundle_in_force(in_force.pk).version == 1
