"""Rule evaluation under attack: a rule that errors (an overflow the model provokes with a large
integer) denies with POLICY_ERROR, forbid or permit, never allows; a shadow forbid, satisfied or
erroring, never denies; a forbid on an optional argument, and principals spelt with quotes and
non-ASCII letters, are judged as written."""
from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from agentplatform.tenancy.models import User
from audit.models import AuditEvent
from policies import selectors
from policies.models import ShadowVerdict
from tests.policies.support import apply, call
from tools.registry import ToolSpec

pytestmark = pytest.mark.django_db


class Transfer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    units: int
    memo: str | None = None


def _transfer(ctx, params: Transfer) -> dict[str, Any]:
    return {"units": params.units}


TRANSFER = ToolSpec(name="test_transfer", description="Transfer units (test tool).", parameters=Transfer,
                    execute=_transfer, risk="LOW")


@pytest.fixture(autouse=True)
def _fresh_bundles():
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


@pytest.fixture
def transfer(install_tool, requester):
    return install_tool(TRANSFER, users=[requester])


def _bundle(cedar: str) -> str:
    return yaml.safe_dump({"version": 1, "cedar": textwrap.dedent(cedar)})


def _ran() -> int:
    return AuditEvent.objects.filter(tool_name="test_transfer", decision="EXECUTED").count()


@pytest.mark.parametrize("effect", ['forbid', '@gate("confirm") permit'])
@pytest.mark.parametrize("units", [2 ** 62, 2 ** 63 - 1, -(2 ** 63)])
def test_a_rule_the_model_makes_overflow_denies_with_policy_error(requester, transfer, effect, units):
    apply(requester.tenant_id, _bundle(f'''\
        @id("big")
        {effect} (principal, action == Action::"test_transfer", resource)
        when {{ context.arguments.units * 4 > 1000 }};
        '''))
    outcome = call(requester, "test_transfer", {"units": units})
    assert (outcome.result.success, outcome.result.code, outcome.pending) == (False, "POLICY_ERROR", None)
    assert "big" in outcome.result.message and _ran() == 0
    assert call(requester, "test_transfer", {"units": 3}, call_id="call_2").result.success


@pytest.mark.parametrize("units", [2 ** 63, -(2 ** 63) - 1, 10 ** 30])
def test_an_integer_beyond_64_bits_is_never_judged_without_it(requester, transfer, units):
    apply(requester.tenant_id, _bundle('''\
        @id("cap") forbid (principal, action == Action::"test_transfer", resource)
        when { context.arguments.units > 1000 };
        '''))
    outcome = call(requester, "test_transfer", {"units": units})
    assert outcome.result.success is False and _ran() == 0


def test_a_shadow_forbid_satisfied_or_erroring_never_denies(requester, transfer):
    apply(requester.tenant_id, _bundle('''\
        @id("shadow-all") @mode("shadow")
        forbid (principal, action == Action::"test_transfer", resource);
        @id("shadow-overflow") @mode("shadow")
        forbid (principal, action == Action::"test_transfer", resource)
        when { context.arguments.units * 4 > 1000 };
        '''))
    outcome = call(requester, "test_transfer", {"units": 2 ** 62})
    assert outcome.result.success and _ran() == 1
    assert set(ShadowVerdict.objects.values_list("rule_id", "would")) == {("shadow-all", "DENY"),
                                                                          ("shadow-overflow", "DENY")}


def test_a_forbid_on_an_optional_argument_denies_when_present_and_allows_when_absent(requester, transfer):
    apply(requester.tenant_id, _bundle('''\
        @id("no-memo-fraud") @reason("no fraud memos")
        forbid (principal, action == Action::"test_transfer", resource)
        when { context.arguments has memo && context.arguments.memo like "*fraud*" };
        '''))
    assert call(requester, "test_transfer", {"units": 1, "memo": "a fraud"}).result.code == "POLICY_DENIED"
    assert call(requester, "test_transfer", {"units": 1, "memo": None}, call_id="c2").result.success
    assert call(requester, "test_transfer", {"units": 1}, call_id="c3").result.success


@pytest.mark.parametrize("username", ['o"brien', "renée", "李雷", "x\\y"])
def test_a_principal_with_quotes_or_non_ascii_letters_is_matched_exactly(requester, transfer, username):
    User.objects.filter(pk=requester.pk).update(username=username)
    requester.refresh_from_db()
    literal = username.replace("\\", "\\\\").replace('"', '\\"')
    apply(requester.tenant_id, _bundle(f'''\
        @id("this-user") @reason("not this user")
        forbid (principal == User::"{literal}", action == Action::"test_transfer", resource);
        @id("not-them") @reason("everyone else")
        forbid (principal, action == Action::"test_transfer", resource)
        unless {{ principal == User::"{literal}" }};
        '''))
    outcome = call(requester, "test_transfer", {"units": 1})
    assert (outcome.result.code, outcome.result.message) == ("POLICY_DENIED", "not this user")
