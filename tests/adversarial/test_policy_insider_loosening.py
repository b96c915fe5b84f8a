"""A tenant administrator loosening a CRITICAL tool's bundle alone: through a limit (raised cap,
shadow mode, removed, moved to a LOW tool, a longer window), a rule's action scope or effect, or
the command with `--as` for another tenant. Each is held for a second person; nothing changes."""
from __future__ import annotations

import io
import textwrap

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agentplatform.controlplane.bundles import policy_bundle_apply
from agentplatform.controlplane.errors import ControlChangeForbidden
from agentplatform.controlplane.services import control_change_approve
from policies.models import PolicyBundle
from tests.policies.support import EXAMPLE

pytestmark = pytest.mark.django_db

LIMIT = '''\
limits:
  - id: refunds-per-order-day
    tool: {tool}
    per: {per}
    window_seconds: {window}
    max_count: {count}
    when_exceeded: deny
    mode: {mode}
'''


def _with_limit(tool="refund_order", per="order_id", window=86400, count=3, mode="enforce") -> str:
    return EXAMPLE + LIMIT.format(tool=tool, per=per, window=window, count=count, mode=mode)


def _versions(tenant_id: int) -> list[int]:
    return sorted(PolicyBundle.objects.filter(tenant_id=tenant_id).values_list("version", flat=True))


@pytest.mark.parametrize("looser, why", [
    (_with_limit(count=30), "changed"),
    (_with_limit(mode="shadow"), "switched to shadow"),
    (EXAMPLE, "removed"),
    (_with_limit(tool="list_orders", per="user"), "changed"),
    (_with_limit(window=60), "changed"),
    (_with_limit(per="reason"), "changed"),
])
def test_loosening_a_limit_of_a_critical_tool_waits_for_a_second_person(acme_admin, acme_admin2, looser, why):
    tenant = acme_admin.tenant
    assert policy_bundle_apply(tenant=tenant, text=_with_limit(), actor=acme_admin).status == "applied"
    outcome = policy_bundle_apply(tenant=tenant, text=looser, actor=acme_admin)
    assert (outcome.status, outcome.code) == ("pending", "POLICY_BUNDLE_LOOSENS")
    assert outcome.loosens == [f"limit refunds-per-order-day (refund_order) {why}"]
    with pytest.raises(ControlChangeForbidden):
        control_change_approve(change_id=outcome.change.pk, approver=acme_admin)
    assert _versions(tenant.pk) == [1]


@pytest.mark.parametrize("old, new", [
    ('forbid (principal, action == Action::"refund_order", resource)',
     'forbid (principal, action == Action::"list_orders", resource)'),
    ('forbid (principal, action == Action::"refund_order", resource)',
     'forbid (principal, action in [Action::"list_orders"], resource)'),
    ('forbid (principal, action, resource)',
     'forbid (principal, action == Action::"list_orders", resource)'),
    ('forbid (principal, action == Action::"refund_order", resource)',
     'forbid (principal == User::"nobody", action == Action::"refund_order", resource)'),
])
def test_narrowing_a_rules_scope_away_from_a_critical_tool_loosens(acme_admin, old, new):
    tenant = acme_admin.tenant
    text = textwrap.dedent('''\
        version: 1
        cedar: |
          @id("never")
          {head}
          when {{ context.risk == "CRITICAL" }};
        ''')
    assert policy_bundle_apply(tenant=tenant, text=text.format(head=old), actor=acme_admin).status == "applied"
    outcome = policy_bundle_apply(tenant=tenant, text=text.format(head=new), actor=acme_admin)
    assert outcome.status == "pending" and outcome.loosens and "rule never" in outcome.loosens[0]
    assert _versions(tenant.pk) == [1]


def test_a_forbid_turned_into_a_gated_permit_loosens(acme_admin):
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    softer = EXAMPLE.replace('@reason("Refunds over 5,000 are handled by finance, not the assistant")\n  forbid',
                             '@gate("approval") @quorum("9")\n  permit')
    assert softer != EXAMPLE
    outcome = policy_bundle_apply(tenant=tenant, text=softer, actor=acme_admin)
    assert outcome.status == "pending" and outcome.loosens == ["rule no-refund-over-5000 (refund_order) changed"]


def test_the_command_as_a_tenant_admin_cannot_reach_another_tenant(people, tmp_path):
    path = tmp_path / "bundle.yaml"
    path.write_text(EXAMPLE)
    globex_admin = people["globex"]["admin"]
    with pytest.raises(CommandError):
        call_command("policy_apply", "--tenant", "acme", str(path), "--as", globex_admin.username,
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert _versions(people["acme"]["admin"].tenant_id) == []
