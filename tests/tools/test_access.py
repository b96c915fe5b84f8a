"""Effective access. Granting `use_tool` is not enough (the tool's own Django
permission is needed too): the refusal names what the requester lacks, the admin shows each
condition for a user and a tool, and neither reveals another tenant's data."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm, remove_perm

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from audit.models import AuditEvent
from tools.access import refusal_message, tool_access, tools_access
from tools.errors import ToolPermissionDenied
from tools.models import TenantToolPolicy, Tool

pytestmark = pytest.mark.django_db

ORDER = "A202607290001"
CANCEL = f"Cancel order {ORDER} because the customer changed their mind"


def _without_cancel_permission(user) -> None:
    user.user_permissions.remove(Permission.objects.get(content_type__app_label="catalog", codename="cancel_order"))


def test_use_tool_alone_is_refused_and_the_refusal_names_the_missing_permission(requester):
    # given: the requester keeps use_tool on cancel_order but loses catalog.cancel_order
    _without_cancel_permission(requester)

    with pytest.raises(ToolPermissionDenied) as refused:
        services.chat_send(user=requester, message=CANCEL)

    message = refused.value.message
    assert "catalog.cancel_order" in message and "cancel_order" in message
    assert "use_tool" not in message  # held: not named as missing
    assert "租户管理员" in message  # bilingual, says who can grant it
    run = Run.objects.get(user=requester)
    assert (run.status, run.error_code) == (Run.Status.FAILED, "PERMISSION_DENIED")
    row = AuditEvent.objects.get(actor=requester, tool_name="cancel_order", decision="DENIED")
    assert "catalog.cancel_order" in row.message


def test_a_member_without_anything_is_told_both_grants_are_missing(nobody):
    with pytest.raises(ToolPermissionDenied) as refused:
        services.chat_send(user=nobody, message=CANCEL)

    message = refused.value.message
    assert "use_tool on the tool cancel_order" in message and "the permission catalog.cancel_order" in message


def test_the_refusal_reveals_nothing_of_another_tenant(people):
    # given: cancel_order is disabled for acme but enabled for globex, whose requester holds it
    acme_nobody = people["acme"]["nobody"]
    policy = TenantToolPolicy.objects.get(tenant=acme_nobody.tenant, tool__name="cancel_order")
    policy.enabled = False
    policy.save()
    outcome = services.chat_send(user=acme_nobody, message=CANCEL)

    # then: acme hears "no such tool", not "permission denied" (which would say it exists elsewhere)
    run = outcome.run
    assert run.status == Run.Status.COMPLETED
    row = AuditEvent.objects.get(actor=acme_nobody, tool_name="cancel_order")
    assert (row.decision, row.status) == ("NOT_FOUND", "TOOL_NOT_FOUND")
    # and a refusal in acme never names globex, its users or its orders
    with pytest.raises(ToolPermissionDenied) as refused:
        services.chat_send(user=acme_nobody, message="Refund A202607300003 because it is globex's order")
    for secret in ("globex", "Globex", "A20260730", "环球"):
        assert secret not in refused.value.message
    assert "refund_order" in refused.value.message


def test_the_api_answers_403_with_the_missing_permission(client, requester):
    _without_cancel_permission(requester)
    client.force_login(requester)

    response = client.post("/api/v1/chat/", {"message": CANCEL}, content_type="application/json")

    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "PERMISSION_DENIED" and "catalog.cancel_order" in body["message"]


def test_each_condition_is_checked_on_its_own(people):
    requester, nobody = people["acme"]["requester"], people["acme"]["nobody"]
    cancel = Tool.objects.get(name="cancel_order")
    assert tool_access(user=requester, tool=cancel).allowed

    _without_cancel_permission(requester)
    remove_perm("tools.use_tool", requester, cancel)
    cancel.enabled = False
    cancel.save()
    access = tool_access(user=requester, tool=cancel)
    assert [c.key for c in access.missing] == ["platform", "use_tool", "permission"]
    assert access.condition("tenant").held and access.condition("member").held

    # a grant through a group counts, as in the pipeline
    approvers = requester.groups.model.objects.get(name="acme-approvers")
    assign_perm("tools.use_tool", approvers, cancel)
    requester.groups.add(approvers)
    assert tool_access(user=requester, tool=cancel).condition("use_tool").held

    nobody.is_active = False
    nobody.save()
    by_tool = {a.tool: a for a in tools_access(user=nobody)}
    assert not by_tool["query_inventory"].condition("member").held
    assert not by_tool["query_inventory"].condition("permission").held
    assert "catalog.view_stocklevel" in by_tool["query_inventory"].condition("permission").label
    assert "an active membership" in refusal_message(by_tool["query_inventory"])


def test_the_admin_shows_effective_access_and_what_is_missing(client, people):
    acme_admin, requester = people["acme"]["admin"], people["acme"]["requester"]
    _without_cancel_permission(requester)
    client.force_login(acme_admin)

    page = client.get(f"/admin/tools/tool/effective-access/?user={requester.pk}")

    assert page.status_code == 200
    html = page.content.decode()
    rows = {a.tool: a for a in page.context["rows"]}
    assert rows["query_inventory"].allowed and not rows["cancel_order"].allowed
    assert [c.key for c in rows["cancel_order"].missing] == ["permission"]
    assert "permission catalog.cancel_order" in html and ">refused<" in html
    # one tool
    cancel = Tool.objects.get(name="cancel_order")
    one = client.get(f"/admin/tools/tool/effective-access/?user={requester.pk}&tool={cancel.pk}")
    assert [a.tool for a in one.context["rows"]] == ["cancel_order"]
    # the links that lead there
    assert "effective-access" in client.get(f"/admin/tenancy/user/{requester.pk}/change/").content.decode()
    assert "effective-access" in client.get("/admin/tools/tool/").content.decode()


def test_a_tenant_administrator_cannot_look_at_another_tenants_member(client, people):
    client.force_login(people["acme"]["admin"])
    globex_requester = people["globex"]["requester"]

    assert client.get(f"/admin/tools/tool/effective-access/?user={globex_requester.pk}").status_code == 404
    listing = client.get("/admin/tools/tool/effective-access/").content.decode()
    assert "acme-requester" in listing and "globex" not in listing


def test_only_administrators_reach_the_effective_access_page(client, requester, operator, people):
    client.force_login(requester)
    assert client.get("/admin/tools/tool/effective-access/").status_code in (302, 404)
    client.force_login(operator)
    page = client.get(f"/admin/tools/tool/effective-access/?user={people['globex']['requester'].pk}")
    assert page.status_code == 200 and all(a.allowed for a in page.context["rows"])


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["user=%C2%B2", "user={user}&tool=%C2%B2"])
def test_effective_access_reads_a_non_ascii_digit_as_no_such_row(client, people, query):
    """"²" is a digit to Python but no row id: not found, never a server error."""
    client.force_login(people["acme"]["admin"])
    url = "/admin/tools/tool/effective-access/?" + query.format(user=people["acme"]["requester"].pk)
    assert client.get(url).status_code == 404


@pytest.mark.django_db
def test_the_grant_action_refuses_a_non_ascii_digit_tool_id(client, people):
    client.force_login(people["acme"]["admin"])
    response = client.post("/admin/tools/tool/effective-access/",
                           {"user": people["acme"]["requester"].pk, "grant": "\u00b2"})
    assert response.status_code == 404
