"""Every control-plane change writes an AuditEvent (decision CONTROL_CHANGE) in the transaction of
the change, with actor, tenant, object and old -> new values, and never a secret (docs/roles.md)."""
from __future__ import annotations

import json
import re
from unittest import mock

import pytest
from django.contrib.auth.models import Group
from django.db import DatabaseError, transaction
from django.urls import reverse
from guardian.shortcuts import assign_perm, remove_perm

from agentplatform.api.models import ApiKey
from agentplatform.controlplane.guards.gate import applying
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.services import tenant_group_create
from agentplatform.tenancy.models import Tenant, TenantGroup, User
from audit.models import AuditEvent
from tests.controlplane.conftest import admin_url
from tools.models import TenantToolPolicy, Tool
from tools.services import tenant_tool_set_enabled

CHANGE = AuditEvent.Decision.CONTROL_CHANGE


@pytest.fixture
def mark(people):
    """Only the rows written after this point (the seed writes its own)."""
    last = AuditEvent.objects.order_by("-occurred_at", "-id").values_list("occurred_at", flat=True).first()

    def rows(**filters):
        qs = AuditEvent.objects.filter(decision=CHANGE, **filters).order_by("occurred_at", "id")
        return list(qs.filter(occurred_at__gt=last) if last else qs)

    return rows


def _details(row: AuditEvent) -> dict:
    return row.masked_arguments


def test_whitelist_change_through_the_service_names_actor_tenant_and_old_new(mark, acme_admin, requester):
    with acting_as(acme_admin):
        tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="refund_order", enabled=False)
    [row] = mark()
    assert (row.tenant_id, row.actor_id, row.status, row.tool_name) == (
        requester.tenant_id, acme_admin.pk, "CHANGED", "refund_order")
    assert _details(row)["object"] == {"type": "tenant_tool_policy", "id": "acme/refund_order"}
    assert (_details(row)["old"], _details(row)["new"]) == ({"enabled": True}, {"enabled": False})
    assert _details(row)["actor_role"] == "tenant_administrator"


def test_tenant_override_in_the_admin_is_audited_with_the_admin_as_actor(client, mark, acme_admin, requester):
    client.force_login(acme_admin)
    entry = TenantToolPolicy.objects.get(tenant_id=requester.tenant_id, tool__name="cancel_order")
    response = client.post(admin_url(TenantToolPolicy, "change", entry.pk),
                           {"tool": str(entry.tool_id), "enabled": "on", "quorum": "3", "ttl_seconds": "60"})
    assert response.status_code == 302
    [row] = mark()
    assert row.actor_id == acme_admin.pk and row.tenant_id == requester.tenant_id
    assert _details(row)["old"] == {"quorum": None, "ttl_seconds": None}
    assert _details(row)["new"] == {"quorum": 3, "ttl_seconds": 60}


def test_a_global_tool_change_is_recorded_for_every_tenant(client, mark, operator):
    client.force_login(operator)
    tool = Tool.objects.get(name="cancel_order")
    form = {"enabled": "on", "risk_override": "CRITICAL", "quorum": "3", "tenant_policies-TOTAL_FORMS": "0",
            "tenant_policies-INITIAL_FORMS": "0", "tenant_policies-MIN_NUM_FORMS": "0",
            "tenant_policies-MAX_NUM_FORMS": "1000"}
    assert client.post(admin_url(Tool, "change", tool.pk), form).status_code == 302
    rows = mark(tool_name="cancel_order")
    assert sorted(r.tenant_id for r in rows) == sorted(Tenant.objects.values_list("pk", flat=True))
    for row in rows:
        assert row.actor_id == operator.pk and _details(row)["scope"] == "platform"
        assert _details(row)["old"] == {"risk_override": "", "quorum": None}
        assert _details(row)["new"] == {"risk_override": "CRITICAL", "quorum": 3}


def test_guardian_grant_and_revoke_in_the_admin_are_audited(client, mark, acme_admin, nobody):
    client.force_login(acme_admin)
    tool = Tool.objects.get(name="query_inventory")
    page = reverse("admin:tools_tool_permissions_manage_user", args=[tool.pk, nobody.pk])
    assert client.post(page, {"permissions": ["use_tool"]}).status_code == 302
    assert client.post(page, {"submit": "1"}).status_code == 302  # no box ticked: revoke
    created, deleted = mark(tool_name="query_inventory")
    assert (created.status, deleted.status) == ("CREATED", "DELETED")
    assert _details(created)["new"] == {"user": "acme-nobody", "permission": "tools.use_tool",
                                        "object": "tool query_inventory"}
    assert _details(deleted)["old"] == _details(created)["new"] and _details(deleted)["new"] is None
    assert created.actor_id == deleted.actor_id == acme_admin.pk
    assert created.tenant_id == nobody.tenant_id


def test_a_shell_grant_without_a_request_is_audited_without_an_actor(mark, people):
    group = Group.objects.get(name="globex-approvers")
    tool = Tool.objects.get(name="query_inventory")
    assign_perm("tools.approve_tool", group, tool)
    remove_perm("tools.approve_tool", group, tool)
    created, deleted = mark()
    assert created.actor_id is None and created.tenant.slug == "globex"
    assert _details(created)["actor_role"].startswith("system")
    assert deleted.status == "DELETED"


@pytest.fixture
def readers(people):
    """A group of acme that holds no approve_tool: joining it takes effect at once."""
    return tenant_group_create(name="acme-readers", tenant_id=people["acme"]["admin"].tenant_id)


def test_membership_and_role_changes_are_audited(readers, mark, acme_admin, nobody):
    with acting_as(acme_admin):
        nobody.groups.add(readers)
        readers.user_set.remove(nobody)          # the reverse side too
    with acting_as(acme_admin), applying(object()):
        nobody.is_staff = True                   # making an administrator is a control change: as applied
        nobody.save()
    added, removed, role = mark()
    assert (_details(added)["old"], _details(added)["new"]) == ({"groups": []}, {"groups": ["acme-readers"]})
    assert (_details(removed)["old"], _details(removed)["new"]) == ({"groups": ["acme-readers"]}, {"groups": []})
    assert _details(added)["object"]["type"] == "membership"
    assert _details(role)["old"] == {"is_staff": False, "role": "member"}
    assert _details(role)["new"] == {"is_staff": True, "role": "tenant_administrator"}
    assert {r.actor_id for r in (added, removed, role)} == {acme_admin.pk}


def test_a_password_change_is_recorded_without_the_hash(mark, nobody):
    nobody.set_password("another-secret-99")
    nobody.save()
    [row] = mark()
    assert _details(row)["new"] == {"password": "<changed>"}
    assert nobody.password not in json.dumps(row.masked_arguments) + row.message


def test_api_token_issue_and_revocation_are_audited_without_the_key(client, mark, acme_admin, people):
    integration = people["acme"]["integration"]  # a service account: the only key an administrator receives
    client.force_login(acme_admin)
    response = client.post(admin_url(User, "changelist"), {"action": "issue_service_account_key",
                                                           "_selected_action": [integration.pk]})
    assert response.status_code == 200
    key = re.search(r'data-testid="api-token">([^<]+)<', response.content.decode()).group(1)
    [stored] = ApiKey.objects.filter(user=integration)
    assert client.post(admin_url(ApiKey, "delete", stored.pk), {"post": "yes"}).status_code == 302
    created, deleted = mark()
    assert (created.status, deleted.status) == ("CREATED", "DELETED")
    assert _details(created)["object"] == {"type": "api_token", "id": "token of acme-integration (issued in the admin)"}
    for row in (created, deleted):
        assert row.actor_id == acme_admin.pk and row.tenant_id == integration.tenant_id
        assert key not in json.dumps(row.masked_arguments) + row.message


def test_group_created_by_a_tenant_admin_is_audited_in_their_tenant(client, mark, acme_admin):
    client.force_login(acme_admin)
    assert client.post(admin_url(Group, "add"), {"name": "acme-reviewers"}).status_code == 302
    kinds = [(_details(r)["object"]["type"], r.status, r.tenant_id) for r in mark()]
    assert ("group_tenant", "CREATED", acme_admin.tenant_id) in kinds
    assert TenantGroup.objects.filter(group__name="acme-reviewers").exists()


def test_the_change_and_its_audit_row_commit_or_fail_together(mark, requester):
    with mock.patch("agentplatform.controlplane.receivers.changes.events.control_change_recorded",
                    side_effect=DatabaseError("audit down")):
        with pytest.raises(DatabaseError), transaction.atomic():
            tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="refund_order", enabled=False)
    assert TenantToolPolicy.objects.get(tenant_id=requester.tenant_id, tool__name="refund_order").enabled is True

    with pytest.raises(RuntimeError), transaction.atomic():
        tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name="refund_order", enabled=False)
        raise RuntimeError("the change is rolled back")
    assert mark() == []


def test_a_save_that_changes_nothing_audited_writes_nothing(mark, people):
    from tools.services import tools_sync_registry

    tools_sync_registry()
    Tool.objects.get(name="cancel_order").save()
    assert mark() == []
