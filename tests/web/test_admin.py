"""The Django admin: evidence is read-only, tools and whitelists are editable, guardian's object
permission screens grant use_tool/approve_tool, and staff can issue API tokens."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from agentplatform.api.models import ApiKey
from agentplatform.tenancy.credentials import api_token_issue

from agentplatform.runtime import services as runtime
from agentplatform.runtime.models import Conversation, Run, RunEvent
from agentplatform.tenancy.models import User
from approvals import approver_actions
from approvals.models import Approval, ConfirmationRequest
from audit.models import AuditEvent
from tools.models import IdempotencyRecord, TenantToolPolicy, Tool
from tools.selectors import offered_tools

READ_ONLY = [AuditEvent, ConfirmationRequest, Approval, IdempotencyRecord, Conversation, Run, RunEvent]


@pytest.fixture
def evidence(requester, approver1):
    """A run that cancelled an order (audit rows, a consumed confirmation, an idempotency record)
    and a refund with one approval so far."""
    outcome = runtime.chat_send(user=requester, message="cancel A202607290001 because no longer needed")
    runtime.chat_send(user=requester, message="yes", conversation_id=outcome.run.conversation_id,
                      confirmation_token=outcome.pending[0].token)
    refund = runtime.chat_send(user=requester, message="refund A202607290003 amount 5 because damaged")
    approver_actions.confirmation_approve(request_id=refund.pending[0].confirmation_id, approver=approver1)
    assert IdempotencyRecord.objects.exists() and AuditEvent.objects.exists() and Approval.objects.exists()
    return outcome.run


def _url(model, action: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{action}", args=args)


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_evidence_is_viewable_but_never_added_changed_or_deleted(client, acme_admin, evidence, model):
    client.force_login(acme_admin)
    obj = model.objects.first()

    assert client.get(_url(model, "changelist")).status_code == 200
    page = client.get(_url(model, "change", obj.pk))
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()              # view only, no Save button
    assert client.get(_url(model, "add")).status_code == 403
    assert client.get(_url(model, "delete", obj.pk)).status_code == 403
    assert client.post(_url(model, "change", obj.pk), {}).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


def test_confirmation_admin_shows_masked_arguments_not_the_token_digest(client, acme_admin, evidence):
    client.force_login(acme_admin)
    request = ConfirmationRequest.objects.get(tool_name="cancel_order")

    html = client.get(_url(ConfirmationRequest, "change", request.pk)).content.decode()

    assert request.summary in html
    assert "Masked arguments" in html
    assert request.token_hash is None or request.token_hash not in html


def test_tool_admin_edits_overrides_and_lists_the_tenant_whitelist(client, operator, people):
    client.force_login(operator)
    tool = Tool.objects.get(name="cancel_order")

    page = client.get(_url(Tool, "change", tool.pk)).content.decode()
    assert "tenant whitelist" in page.lower() and "in effect now" in page.lower()
    assert "risk HIGH, policy REQUESTER" in page
    assert client.get(_url(Tool, "add")).status_code == 403
    assert client.get(_url(Tool, "delete", tool.pk)).status_code == 403

    policies = TenantToolPolicy.objects.filter(tool=tool).order_by("pk")
    form = {"enabled": "on", "risk_override": "CRITICAL", "policy_override": "", "quorum": "3", "ttl_seconds": "120",
            "tenant_policies-TOTAL_FORMS": str(len(policies)), "tenant_policies-INITIAL_FORMS": str(len(policies)),
            "tenant_policies-MIN_NUM_FORMS": "0", "tenant_policies-MAX_NUM_FORMS": "1000"}
    for i, policy in enumerate(policies):
        form |= {f"tenant_policies-{i}-id": str(policy.pk), f"tenant_policies-{i}-tool": str(tool.pk),
                 f"tenant_policies-{i}-tenant": str(policy.tenant_id), f"tenant_policies-{i}-enabled": "on",
                 f"tenant_policies-{i}-risk_override": "", f"tenant_policies-{i}-quorum": "",
                 f"tenant_policies-{i}-ttl_seconds": ""}
    response = client.post(_url(Tool, "change", tool.pk), form)

    assert response.status_code == 302, response.content.decode()[:2000]
    tool.refresh_from_db()
    assert (tool.risk_override, tool.quorum, tool.ttl_seconds) == ("CRITICAL", 3, 120)
    page = client.get(_url(Tool, "change", tool.pk)).content.decode()
    assert "risk CRITICAL, policy APPROVERS, quorum 3, TTL 120 s" in page


def test_tenant_page_whitelist_inline_disables_a_tool_for_that_tenant_only(client, operator, requester, outsider):
    client.force_login(operator)
    tenant = requester.tenant
    assert "cancel_order" in offered_tools(user=requester)
    policies = list(TenantToolPolicy.objects.filter(tenant=tenant).select_related("tool").order_by("pk"))
    members = list(User.objects.filter(tenant=tenant).order_by("pk"))
    form = {"slug": tenant.slug, "name": tenant.name,
            "users-TOTAL_FORMS": str(len(members)), "users-INITIAL_FORMS": str(len(members)),
            "users-MIN_NUM_FORMS": "0", "users-MAX_NUM_FORMS": "1000",
            "tool_policies-TOTAL_FORMS": str(len(policies)), "tool_policies-INITIAL_FORMS": str(len(policies)),
            "tool_policies-MIN_NUM_FORMS": "0", "tool_policies-MAX_NUM_FORMS": "1000"}
    for i, member in enumerate(members):
        form |= {f"users-{i}-id": str(member.pk), f"users-{i}-tenant": str(tenant.pk)}
    for i, policy in enumerate(policies):
        form |= {f"tool_policies-{i}-id": str(policy.pk), f"tool_policies-{i}-tenant": str(tenant.pk),
                 f"tool_policies-{i}-tool": str(policy.tool_id)}
        if policy.tool.name != "cancel_order":
            form[f"tool_policies-{i}-enabled"] = "on"

    response = client.post(_url(type(tenant), "change", tenant.pk), form)

    assert response.status_code == 302, response.content.decode()[:3000]
    assert "cancel_order" not in offered_tools(user=User.objects.get(pk=requester.pk))
    assert "refund_order" in offered_tools(user=User.objects.get(pk=requester.pk))
    assert "cancel_order" in offered_tools(user=outsider)                 # globex keeps it


def test_whitelist_actions_call_the_service(client, acme_admin, requester):
    client.force_login(acme_admin)
    entry = TenantToolPolicy.objects.get(tenant=requester.tenant, tool__name="refund_order")

    response = client.post(_url(TenantToolPolicy, "changelist"),
                           {"action": "disable_entries", "_selected_action": [entry.pk]})

    assert response.status_code == 302
    entry.refresh_from_db()
    assert entry.enabled is False
    assert "refund_order" not in offered_tools(user=User.objects.get(pk=requester.pk))


def test_guardian_screens_grant_use_tool_to_a_user_and_show_group_grants(client, acme_admin, nobody):
    client.force_login(acme_admin)
    tool = Tool.objects.get(name="query_inventory")
    refund = Tool.objects.get(name="refund_order")
    permissions_url = reverse("admin:tools_tool_permissions", args=[refund.pk])

    page = client.get(permissions_url)
    assert page.status_code == 200
    assert Group.objects.get(name="acme-approvers").name in page.content.decode()

    chosen = client.post(reverse("admin:tools_tool_permissions", args=[tool.pk]),
                         {"user": nobody.username, "submit_manage_user": "1"})
    manage_url = reverse("admin:tools_tool_permissions_manage_user", args=[tool.pk, nobody.pk])
    assert chosen.status_code == 302 and chosen["Location"] == manage_url
    saved = client.post(manage_url, {"permissions": ["use_tool"]})

    assert saved.status_code == 302
    fresh = User.objects.get(pk=nobody.pk)
    assert fresh.has_perm("tools.use_tool", tool)
    assert not fresh.has_perm("tools.approve_tool", tool)


def test_issue_key_action_rotates_and_shows_a_service_account_key(client, acme_admin, people):
    integration = people["acme"]["integration"]
    client.force_login(acme_admin)
    old = api_token_issue(user=integration)

    response = client.post(_url(User, "changelist"), {"action": "issue_service_account_key",
                                                      "_selected_action": [integration.pk]})

    assert response.status_code == 200
    [stored] = ApiKey.objects.filter(user=integration)
    import re
    new = re.search(r'data-testid="api-token">([^<]+)<', response.content.decode()).group(1)
    assert new.startswith(stored.token_key)
    assert new != old
    assert new in response.content.decode() and old not in response.content.decode()
    api = client.__class__()
    assert api.get("/api/v1/tools/", HTTP_AUTHORIZATION=f"Token {new}").status_code == 200
    assert api.get("/api/v1/tools/", HTTP_AUTHORIZATION=f"Token {old}").status_code == 401


def test_issue_key_action_refuses_a_person(client, acme_admin, requester):
    client.force_login(acme_admin)
    before = api_token_issue(user=requester)

    response = client.post(_url(User, "changelist"), {"action": "issue_service_account_key",
                                                      "_selected_action": [requester.pk]}, follow=True)

    assert response.status_code == 200 and 'data-testid="api-token"' not in response.content.decode()
    assert "KEY_FOR_ANOTHER_PERSON" not in response.content.decode()  # the message is for people
    assert "shown only to the person it authenticates" in response.content.decode()
    [kept] = ApiKey.objects.filter(user=requester)  # nothing issued, nothing rotated
    assert before.startswith(kept.token_key)
