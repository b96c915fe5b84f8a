"""Control-plane pages and rows that named another tenant's things (found by an attack in session
6): a group's creation written to every tenant's trail, the effective-access page and the MCP
tools filter listing another tenant's MCP tool and servers, and a shared tool's history showing
an operator's change to another tenant's whitelist row."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.models import AuditEvent
from tests.controlplane.conftest import admin_url, globex_evidence  # noqa: F401 - fixture
from tools.models import TenantToolPolicy, Tool

pytestmark = pytest.mark.django_db


def _trail_mentions(tenant, text: str) -> list[str]:
    return [e.message for e in AuditEvent.objects.filter(tenant=tenant) if text in e.message + str(e.masked_arguments)]


def test_a_group_a_tenant_administrator_creates_is_audited_in_their_tenants_trail_only(client, acme_admin,
                                                                                        globex_admin):
    client.force_login(acme_admin)
    response = client.post(admin_url(Group, "add"), {"name": "acme-secret-merger-team"})

    assert response.status_code == 302
    assert _trail_mentions(acme_admin.tenant, "acme-secret-merger-team")  # audited where it belongs
    assert not _trail_mentions(globex_admin.tenant, "acme-secret-merger-team")
    client.force_login(globex_admin)
    body = client.get("/api/v1/audit-events/?kind=control").content.decode()
    assert "acme-secret-merger-team" not in body


def _operator_adds_group(client, operator, name: str, tenant_id: int, *, remove_tenant_row: bool = False):
    """An operator's POST of the group add form with its tenant inline filled in (and marked for
    deletion when `remove_tenant_row`)."""
    client.force_login(operator)
    data = {"name": name, "tenant_link-TOTAL_FORMS": "1", "tenant_link-INITIAL_FORMS": "0",
            "tenant_link-MIN_NUM_FORMS": "0", "tenant_link-MAX_NUM_FORMS": "1", "tenant_link-0-tenant": str(tenant_id)}
    if remove_tenant_row:
        data["tenant_link-0-DELETE"] = "on"
    return client.post(admin_url(Group, "add"), data)


def test_a_group_an_operator_creates_for_one_tenant_is_audited_in_that_trail_only(client, operator, acme_admin,
                                                                                  globex_admin):
    from agentplatform.tenancy.models import TenantGroup

    response = _operator_adds_group(client, operator, "acme-auditors-2", acme_admin.tenant_id)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert TenantGroup.objects.get(group__name="acme-auditors-2").tenant_id == acme_admin.tenant_id
    assert _trail_mentions(acme_admin.tenant, "acme-auditors-2")
    assert not _trail_mentions(globex_admin.tenant, "acme-auditors-2")


def test_the_demo_seeds_groups_are_audited_in_their_own_tenants_trail_only(people):
    acme, globex = people["acme"]["admin"].tenant, people["globex"]["admin"].tenant

    assert not _trail_mentions(acme, "globex-approvers") and not _trail_mentions(globex, "acme-approvers")


def test_the_effective_access_page_names_no_other_tenants_mcp_tool(client, acme_admin, globex_evidence):
    tool = Tool.objects.get(name="globex_crm__find_contact")
    requester = acme_admin.tenant.users.get(username="acme-requester")
    client.force_login(acme_admin)

    page = client.get(reverse("admin:tools_tool_effective_access"), {"user": requester.pk}).content.decode()
    by_id = client.get(reverse("admin:tools_tool_effective_access"), {"user": requester.pk, "tool": tool.pk})

    assert "globex_crm__find_contact" not in page and "cancel_order" in page
    assert by_id.status_code == 404


def test_the_mcp_tools_server_filter_names_no_other_tenants_server(client, acme_admin, globex_evidence):
    from mcp_sources.models import McpServer

    McpServer.objects.create(name="globex_payroll", tenant=globex_evidence["requester"].tenant, transport="http",
                             url="https://payroll.globex.example/mcp", owner="globex HR")
    client.force_login(acme_admin)

    response = client.get(reverse("admin:mcp_sources_mcptool_changelist"))

    page = response.content.decode()
    assert response.status_code == 200 and "globex_payroll" not in page and "globex_crm" not in page


def test_a_shared_tools_history_hides_another_tenants_whitelist_changes(client, operator, acme_admin, globex_admin):
    # given: an operator changed globex's whitelist row inline on refund_order's page
    tool = Tool.objects.get(name="refund_order")
    rows = list(TenantToolPolicy.objects.filter(tool=tool).order_by("pk"))
    data = {"enabled": "on", "risk_override": tool.risk_override, "policy_override": tool.policy_override,
            "quorum": tool.quorum or "", "ttl_seconds": tool.ttl_seconds or "",
            "critical_floor_waiver": tool.critical_floor_waiver,
            "tenant_policies-TOTAL_FORMS": str(len(rows)), "tenant_policies-INITIAL_FORMS": str(len(rows)),
            "tenant_policies-MIN_NUM_FORMS": "0", "tenant_policies-MAX_NUM_FORMS": "1000"}
    for i, row in enumerate(rows):
        data.update({f"tenant_policies-{i}-id": row.pk, f"tenant_policies-{i}-tool": tool.pk,
                     f"tenant_policies-{i}-tenant": row.tenant_id, f"tenant_policies-{i}-enabled": "on",
                     f"tenant_policies-{i}-risk_override": row.risk_override,
                     f"tenant_policies-{i}-quorum": row.quorum or "",
                     f"tenant_policies-{i}-ttl_seconds": row.ttl_seconds or ""})
        if row.tenant_id == globex_admin.tenant_id:
            data[f"tenant_policies-{i}-enabled"] = ""
            data[f"tenant_policies-{i}-quorum"] = "3"
    data = {k: v for k, v in data.items() if v != ""}
    client.force_login(operator)
    assert client.post(admin_url(Tool, "change", tool.pk), data).status_code == 302
    assert not TenantToolPolicy.objects.get(tool=tool, tenant=globex_admin.tenant).enabled
    assert "globex" in client.get(admin_url(Tool, "history", tool.pk)).content.decode().lower()  # operators see it

    # when: acme's administrator opens the tool's history
    client.force_login(acme_admin)
    history = client.get(admin_url(Tool, "history", tool.pk))

    # then: the entry is there, without the other tenant's row
    assert history.status_code == 200
    body = history.content.decode()
    assert "globex" not in body.lower() and "tenant whitelist rows" in body


def test_a_group_whose_tenant_row_the_operator_removed_is_platform_wide_in_the_trail(client, operator, acme_admin,
                                                                                     globex_admin):
    from agentplatform.tenancy.models import TenantGroup

    response = _operator_adds_group(client, operator, "platform-wide-x", acme_admin.tenant_id, remove_tenant_row=True)

    assert response.status_code == 302
    assert not TenantGroup.objects.filter(group__name="platform-wide-x").exists()
    # a platform-wide group is every tenant's business, as before
    assert _trail_mentions(acme_admin.tenant, "platform-wide-x") and _trail_mentions(globex_admin.tenant, "platform-wide-x")
