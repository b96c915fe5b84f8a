"""Tenant overrides only tighten; only a platform operator loosens a tool globally, and a CRITICAL
tool keeps two distinct approvers unless a written reason is stored (docs/roles.md). What the
admin shows is what the pipeline applies (tools.policy.effective_policy)."""
from __future__ import annotations

import pytest

from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.services import control_change_approve
from agentplatform.tenancy.models import User
from tests.controlplane.conftest import admin_url
from tools.models import TenantToolPolicy, Tool
from tools.policy import effective_policy
from tools.registry import registry
from tools.selectors import offered_tools


def _entry(user, tool_name: str) -> TenantToolPolicy:
    return TenantToolPolicy.objects.select_related("tool").get(tenant_id=user.tenant_id, tool__name=tool_name)


def _post_entry(client, entry: TenantToolPolicy, **values):
    form = {"tool": str(entry.tool_id), "enabled": "on", "risk_override": "", "quorum": "", "ttl_seconds": ""}
    form.update({k: str(v) for k, v in values.items()})
    return client.post(admin_url(TenantToolPolicy, "change", entry.pk), {k: v for k, v in form.items() if v != ""})


def _applied(user, tool_name: str):
    """The policy the pipeline applies for `user` now (the manager's path: offered_tools + effective_policy)."""
    spec, row = offered_tools(user=User.objects.get(pk=user.pk))[tool_name]
    return effective_policy(spec, row)


@pytest.mark.parametrize("tool_name, values, field", [
    ("refund_order", {"risk_override": "LOW"}, "risk_override"),          # CRITICAL -> LOW
    ("cancel_order", {"risk_override": "MEDIUM"}, "risk_override"),       # HIGH -> MEDIUM
    ("refund_order", {"quorum": 1}, "quorum"),                            # 2 approvers -> 1
    ("cancel_order", {"ttl_seconds": 86400}, "ttl_seconds"),              # 900 s -> a day
])
def test_a_tenant_override_that_loosens_is_refused(client, acme_admin, requester, tool_name, values, field):
    client.force_login(acme_admin)
    entry = _entry(requester, tool_name)
    before = _applied(requester, tool_name)

    response = _post_entry(client, entry, **values)

    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    entry.refresh_from_db()
    assert (entry.risk_override, entry.quorum, entry.ttl_seconds) == ("", None, None)
    assert _applied(requester, tool_name) == before


def test_a_tenant_tightens_and_the_pipeline_applies_it_in_that_tenant_only(client, acme_admin, requester, outsider):
    client.force_login(acme_admin)
    cancel = _entry(requester, "cancel_order")          # HIGH, requester confirms, 900 s

    response = _post_entry(client, cancel, risk_override="CRITICAL", quorum=3, ttl_seconds=120)

    assert response.status_code == 302, response.content.decode()[:2000]
    applied = _applied(requester, "cancel_order")
    assert (applied.risk, applied.policy, applied.quorum, applied.ttl_seconds) == ("CRITICAL", "APPROVERS", 3, 120)
    other = _applied(outsider, "cancel_order")
    assert (other.risk, other.policy, other.quorum, other.ttl_seconds) == ("HIGH", "REQUESTER", 1, 900)
    # the admin shows exactly that
    page = client.get(admin_url(TenantToolPolicy, "change", cancel.pk)).content.decode()
    assert "risk CRITICAL, policy APPROVERS, quorum 3, TTL 120 s" in page
    tools_page = client.get(admin_url(Tool, "changelist")).content.decode()
    assert "CRITICAL" in tools_page


def test_a_loose_value_written_around_the_form_has_no_effect(requester):
    """Stored by a shell `update()` (no validation): effective_policy still only tightens."""
    TenantToolPolicy.objects.filter(tenant_id=requester.tenant_id, tool__name="refund_order").update(
        risk_override="LOW", quorum=1, ttl_seconds=999999)
    applied = _applied(requester, "refund_order")
    assert (applied.risk, applied.policy, applied.quorum) == ("CRITICAL", "APPROVERS", 2)
    assert applied.ttl_seconds == registry.get("refund_order").ttl_seconds


def test_disabling_in_a_tenant_removes_the_tool_there(client, acme_admin, requester, outsider):
    client.force_login(acme_admin)
    entry = _entry(requester, "refund_order")
    response = client.post(admin_url(TenantToolPolicy, "change", entry.pk), {"tool": str(entry.tool_id)})
    assert response.status_code == 302
    assert "refund_order" not in offered_tools(user=User.objects.get(pk=requester.pk))
    assert "refund_order" in offered_tools(user=outsider)


def test_only_an_operator_loosens_globally_and_critical_needs_a_written_reason(client, operator, acme_admin, requester):
    refund = Tool.objects.get(name="refund_order")
    client.force_login(acme_admin)
    assert client.post(admin_url(Tool, "change", refund.pk), {"enabled": "on", "risk_override": "LOW"}
                       ).status_code == 403

    client.force_login(operator)
    form = {"enabled": "on", "risk_override": "LOW", "policy_override": "", "quorum": "", "ttl_seconds": "",
            "critical_floor_waiver": "", "tenant_policies-TOTAL_FORMS": "0", "tenant_policies-INITIAL_FORMS": "0",
            "tenant_policies-MIN_NUM_FORMS": "0", "tenant_policies-MAX_NUM_FORMS": "1000"}
    refused = client.post(admin_url(Tool, "change", refund.pk), form)
    assert refused.status_code == 200
    assert "risk_override" in refused.context["adminform"].form.errors
    refund.refresh_from_db()
    assert refund.risk_override == ""

    # written around the form (no reason): the floor still holds in the pipeline
    Tool.objects.filter(pk=refund.pk).update(risk_override="LOW", quorum=1)
    applied = _applied(requester, "refund_order")
    assert (applied.policy, applied.quorum) == ("APPROVERS", 2)
    Tool.objects.filter(pk=refund.pk).update(risk_override="", quorum=None)

    # with a written reason the operator's loosening is proposed; a second operator makes it stand
    waived = client.post(admin_url(Tool, "change", refund.pk),
                         form | {"critical_floor_waiver": "Refunds under the pilot are reviewed daily by finance."})
    assert waived.status_code == 302, waived.content.decode()[:2000]
    assert _applied(requester, "refund_order").policy == "APPROVERS"
    change = PendingControlChange.objects.get(kind="TOOL_POLICY", status="PENDING")
    assert change.proposed_by == operator and change.new_state["risk_override"] == "LOW"
    second = User.objects.create(username="operator2", is_staff=True, is_superuser=True)
    control_change_approve(change_id=change.pk, approver=second)
    applied = _applied(requester, "refund_order")
    assert (applied.risk, applied.policy) == ("LOW", "NONE")


def test_an_operator_raising_quorum_on_critical_needs_no_reason(client, operator, requester):
    refund = Tool.objects.get(name="refund_order")
    refund.quorum = 3
    refund.full_clean()
    refund.save()
    assert _applied(requester, "refund_order").quorum == 3
