"""Fixtures for the control-plane tests: the other tenant's evidence and admin URL helpers."""
from __future__ import annotations

import json
from unittest import mock

import pytest
from django.test import override_settings
from django.urls import reverse

from agentplatform.retention.services import tenant_retention_set
from agentplatform.tenancy.credentials import api_key_issue
from agentplatform.controlplane.bundles import policy_bundle_apply
from agentplatform.controlplane.guards.gate import Gated
from agentplatform.controlplane.services import control_change_propose
from agentplatform.runtime import services as runtime
from agentplatform.runtime.models import TenantModelQuota
from approvals import approver_actions
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.delivery import deliver_webhook
from tests.policies.support import EXAMPLE
from tools.models import Tool


def admin_url(model, action: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{action}", args=args)


@pytest.fixture
def globex_evidence(people, client, django_capture_on_commit_callbacks):
    """Everything a globex tenant accumulates: a cancelled order (run, events, confirmation,
    idempotency record, audit rows), an executed refund with two approvals, an API token and an
    HTTP Idempotency-Key record."""
    globex = people["globex"]
    requester = globex["requester"]
    outcome = runtime.chat_send(user=requester, message="cancel A202607300001 because no longer needed")
    runtime.chat_send(user=requester, message="yes", conversation_id=outcome.run.conversation_id,
                      confirmation_token=outcome.pending[0].token)
    # a webhook endpoint (notifications): the refund's deliveries to it are logged, failed
    # (nothing listens on the discard port; one attempt, no retry)
    endpoint = WebhookEndpoint.objects.create(tenant=requester.tenant, name="globex relay",
                                              url="http://127.0.0.1:9/globex")
    with override_settings(WEBHOOK_ALLOW_PRIVATE_ADDRESSES=True), \
            mock.patch.object(deliver_webhook, "max_retries", 0), \
            django_capture_on_commit_callbacks(execute=True):
        refund = runtime.chat_send(user=requester, message="refund A202607300003 amount 5 because damaged")
    assert WebhookDelivery.objects.filter(endpoint=endpoint).exists()
    with django_capture_on_commit_callbacks(execute=True):  # the resume is enqueued on commit
        approver_actions.confirmation_approve(request_id=refund.pending[0].confirmation_id, approver=globex["approver1"])
        approver_actions.confirmation_approve(request_id=refund.pending[0].confirmation_id, approver=globex["approver2"])
    api_key_issue(user=requester, name="globex evidence")
    # a pending control change: globex's administrator proposes approve_tool for globex-nobody
    control_change_propose(proposer=globex["admin"], gated=Gated(
        "USER_GRANT", requester.tenant_id, {"user_id": globex["nobody"].pk,
                                            "tool_id": Tool.objects.get(name="refund_order").pk},
        {"approve_tool": False}, {"approve_tool": True, "tool": "refund_order"}, "grant approve_tool to globex-nobody"))
    TenantModelQuota.objects.create(tenant=requester.tenant, calls_per_day=1000)
    tenant_retention_set(actor=globex["admin"], tenant_id=requester.tenant_id, values={"run_event_days": 7})
    policy_bundle_apply(tenant=requester.tenant, text=EXAMPLE, actor=globex["admin"])  # a policy bundle version
    client.force_login(requester)
    response = client.post("/api/v1/chat/", data=json.dumps({"message": "How many SKU-10001 in WH-HZ-01?"}),
                           content_type="application/json", HTTP_IDEMPOTENCY_KEY="globex-key-1")
    assert response.status_code == 200
    client.logout()
    _globex_mcp_server(requester.tenant)
    _globex_mcp_call(requester)
    return globex


def _globex_mcp_call(requester) -> None:
    """A call globex's requester made over MCP that waits for their confirmation (an McpCall row)."""
    from agentplatform.api.models import ApiKey
    from agentplatform.mcp_server.calls import Principal, call_tool

    api_key_issue(user=requester, name="globex agent")
    key = ApiKey.objects.filter(user=requester, name="globex agent").get()
    answer = call_tool(Principal(user=requester, api_key=key, client="evidence/1"), name="cancel_order",
                       arguments={"order_id": "A202607300005", "reason": "a call made over MCP"})
    assert answer.state == "pending", answer


def _globex_mcp_server(tenant) -> None:
    """globex's own MCP server and one discovered tool (rows as discovery writes them; no network)."""
    from mcp_sources.models import McpServer, McpTool
    from tools.models import Tool

    server = McpServer.objects.create(name="globex_crm", tenant=tenant, transport="http",
                                      url="https://mcp.globex.example/mcp", owner="globex IT",
                                      headers={"Authorization": "Bearer globex-secret"})
    tool = Tool.objects.create(name="globex_crm__find_contact", source=server.source, owner=server.owner,
                               version="1.0+abc", tenant=tenant, enabled=False, default_risk="HIGH",
                               default_policy="REQUESTER")
    McpTool.objects.create(server=server, tool=tool, remote_name="find_contact", definition_hash="0" * 64,
                           input_schema={"type": "object", "properties": {}})
