"""The admin of MCP calls (agentplatform.mcp_server.admin): read-only, and a tenant administrator
sees only their own tenant's calls (another tenant's answers 404)."""
from __future__ import annotations

from django.test import Client
from django.urls import reverse

from agentplatform.mcp_server import calls
from tests.mcp_server.calls_support import CANCEL_ARGS, HIGH, KEY_NAME, principal_of


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_tenant_administrator_reads_only_their_tenants_calls(requester, outsider, acme_admin):
    ours = calls.call_tool(principal_of(requester)[0], name=HIGH, arguments=CANCEL_ARGS)
    theirs = calls.call_tool(principal_of(outsider, name="globex-key")[0], name=HIGH,
                             arguments={"order_id": "A202607300001", "reason": "customer changed their mind"})
    client = _signed_in(acme_admin)

    listing = client.get(reverse("admin:mcp_server_mcpcall_changelist"))
    page = client.get(reverse("admin:mcp_server_mcpcall_change", args=[ours.call_id]))
    other = client.get(reverse("admin:mcp_server_mcpcall_change", args=[theirs.call_id]))

    assert listing.status_code == 200 and KEY_NAME in listing.text and "globex-key" not in listing.text
    assert page.status_code == 200 and 'name="_save"' not in page.text  # read-only
    assert other.status_code == 404 and "globex-key" not in other.text
    assert client.post(reverse("admin:mcp_server_mcpcall_delete", args=[ours.call_id])).status_code in (403, 404)
