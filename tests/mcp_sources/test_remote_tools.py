"""Remote tools against a local MCP server built with the SDK
(mcp_sources.demo_server), started by the tests over stdio and streamable HTTP: discovery ->
disabled until review -> enabled HIGH by an administrator -> call gated -> confirmed -> executed
once; a changed schema disables the tool; a hung server times out and trips the breaker; another
tenant sees nothing of a tenant's server; credentials never reach logs or audit rows."""
from __future__ import annotations

import json
import logging
import time

import pytest
from django.core.exceptions import ValidationError
from guardian.shortcuts import assign_perm

from agentplatform.runtime.services import conversation_create
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from mcp_sources.models import McpTool
from mcp_sources.services import server_discover, tool_review
from tests.mcp_sources.conftest import OWNER, make_server
from tests.tools.support import assistant, audit_rows, tool_context
from tools.manager import ToolCallingManager
from tools.models import IdempotencyRecord, TenantToolPolicy, Tool
from tools.selectors import offered_tools
from tools.services import tenant_tool_set_enabled

TICKET = "logistics__open_support_ticket"
TRACK = "logistics__track_shipment"
TICKET_ARGS = {"tracking_number": "SF1234567890", "subject": "parcel is late"}


def _server(transport: str, request, **fields):
    if transport == "http":
        return make_server(transport="http", url=request.getfixturevalue("http_server").url, **fields)
    return make_server(transport="stdio", env={"MCP_DEMO_LOG": str(request.getfixturevalue("executions"))},
                       **fields)


def _review(mcp_tool_id: int, reviewer) -> McpTool:
    """Review the definition as it is now (what the review page would show and carry)."""
    shown = McpTool.objects.get(pk=mcp_tool_id).definition_hash
    return tool_review(mcp_tool_id=mcp_tool_id, reviewer=reviewer, definition_hash=shown)


def _enable_for(user, name: str) -> Tool:
    row = Tool.objects.get(name=name)
    if row.tenant_id is None:
        tenant_tool_set_enabled(tenant_id=user.tenant_id, tool_name=name, enabled=True)
    assign_perm("tools.use_tool", user, row)
    return row


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_discovered_tool_is_disabled_until_reviewed_then_gated_confirmed_and_executed_once(
        db, transport, request, requester, operator, executions):
    # given: an operator registered the server and discovered its tools
    server = _server(transport, request)
    report = server_discover(server_id=server.pk)
    assert report.error == "" and sorted(report.added) == [TICKET, TRACK]
    server.refresh_from_db()
    assert server.protocol_version and server.server_name == "acme-logistics"

    ticket = Tool.objects.get(name=TICKET)
    assert (ticket.enabled, ticket.risk, ticket.source, ticket.owner) == (False, "HIGH", "mcp:logistics", OWNER)
    assert ticket.version.startswith("1.4.0+")
    assign_perm("tools.use_tool", requester, ticket)
    with pytest.raises(ValidationError, match="not been reviewed"):  # no tenant may switch it on yet
        tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name=TICKET, enabled=True)
    assert TICKET not in offered_tools(user=requester)  # granted, still not reviewed

    # when: an administrator reviews it (risk stays HIGH: the server's annotations are not used)
    _review(McpTool.objects.get(tool=ticket).pk, operator)
    _enable_for(requester, TICKET)
    assert TICKET in offered_tools(user=requester)
    assert offered_tools(user=requester)[TICKET][1].risk == "HIGH"

    # then: a call is gated; nothing reached the server
    conversation = conversation_create(user=requester)
    message = assistant(("call_1", TICKET, TICKET_ARGS))
    waiting = ToolCallingManager().execute_tool_calls(tool_context(requester, conversation.pk), message)
    assert waiting.outcomes[0].result.code == "CONFIRMATION_REQUIRED"
    assert _lines(executions) == []

    # and: once confirmed it runs once, with the same conversion as a local tool (phone masked)
    pending = waiting.pending[0]
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    ctx = tool_context(requester, conversation.pk, confirmations={"call_1": pending.confirmation_id})
    result = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result
    assert (result.success, result.code) == (True, "OK")
    assert result.data["status"] == "OPEN" and result.data["tracking_number"] == "SF1234567890"
    assert len(_lines(executions)) == 1

    again = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result
    assert again.success is True and len(_lines(executions)) == 1  # answered from the record
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == "CONSUMED"
    record = IdempotencyRecord.objects.get(tool_name=TICKET)
    assert record.status == IdempotencyRecord.Status.SUCCEEDED

    rows = audit_rows(tool_name=TICKET)
    assert [r.decision for r in rows] == ["CONFIRMATION_REQUIRED", "CONFIRMED", "EXECUTED", "IDEMPOTENT_HIT"]
    calls = [r for r in rows if r.decision != "CONFIRMED"]  # the pipeline's rows of the call
    assert {(r.tool_owner, r.tool_version) for r in calls} == {(OWNER, ticket.version)}


def test_arguments_are_checked_against_the_servers_schema_unknown_properties_refused(
        db, request, requester, operator, executions):
    server = _server("stdio", request)
    server_discover(server_id=server.pk)
    _review(McpTool.objects.get(remote_name="open_support_ticket").pk, operator)
    _enable_for(requester, TICKET)
    ctx = tool_context(requester, conversation_create(user=requester).pk)

    invented = ToolCallingManager().execute_tool_calls(ctx, assistant(
        ("c1", TICKET, {**TICKET_ARGS, "isAdmin": True}),
        ("c2", TICKET, {"tracking_number": 7, "subject": "x"}),
        ("c3", TICKET, {"subject": "x"})))

    assert [o.result.code for o in invented.outcomes] == ["INVALID_ARGUMENTS"] * 3
    assert "isAdmin" in invented.outcomes[0].result.data["errors"][0]["error"]
    assert not ConfirmationRequest.objects.exists() and _lines(executions) == []


def test_changed_schema_disables_a_reviewed_tool_until_reviewed_again(db, request, requester, operator, executions):
    # given: a reviewed, enabled tool
    server = _server("stdio", request)
    server_discover(server_id=server.pk)
    mcp_tool = McpTool.objects.get(remote_name="open_support_ticket")
    _review(mcp_tool.pk, operator)
    _enable_for(requester, TICKET)
    reviewed = mcp_tool.definition_hash

    # when: the server swaps the tool's schema behind its name
    server.env = {**server.env, "MCP_DEMO_SCHEMA": "v2"}
    server.save()

    # then: a call checks the definition first and sends nothing
    ctx = tool_context(requester, conversation_create(user=requester).pk)
    Tool.objects.filter(name=TICKET).update(risk_override="LOW", policy_override="NONE")
    result = ToolCallingManager().execute_tool_calls(ctx, assistant(("c1", TICKET, TICKET_ARGS))).outcomes[0].result
    assert (result.success, result.code) == (False, "TOOL_DISABLED") and _lines(executions) == []

    # and: discovery disables it, audits both hashes, and it is no longer offered
    report = server_discover(server_id=server.pk)
    assert report.changed == [TICKET] and report.disabled == [TICKET]
    tool = Tool.objects.get(name=TICKET)
    assert tool.enabled is False and TICKET not in offered_tools(user=requester)
    mcp_tool.refresh_from_db()
    assert mcp_tool.reviewed_hash == reviewed != mcp_tool.definition_hash and not mcp_tool.reviewed
    change = AuditEvent.objects.get(decision="CONTROL_CHANGE", tool_name=TICKET, tenant=requester.tenant,
                                    message__contains="definition changed")
    assert change.masked_arguments["old_hash"] == reviewed
    assert change.masked_arguments["new_hash"] == mcp_tool.definition_hash

    # and: the server's untouched tool stays as reviewed (nothing changed for it)
    assert TRACK not in report.changed


def test_hung_server_times_out_as_outcome_unknown_and_trips_the_breaker(db, requester, operator, executions):
    # given: a reviewed tool (made LOW by an administrator) on a server that hangs on every call
    from tests.mcp_sources.conftest import HttpServer

    hung = HttpServer(executions).start(MCP_DEMO_HANG="60")
    request_timeout = 4
    try:
        codes = _hung_server_story(requester, operator, hung, request_timeout)
    finally:
        hung.stop()
    # then (the story asserts each step): two timeouts, then the open breaker answers without calling
    assert codes == ["OUTCOME_UNKNOWN", "OUTCOME_UNKNOWN", "TOOL_UNAVAILABLE"]


def _hung_server_story(requester, operator, hung, request_timeout) -> list[str]:
    server = make_server(transport="http", url=hung.url, timeout_seconds=request_timeout, breaker_failures=2,
                         breaker_reset_seconds=300)
    server_discover(server_id=server.pk)
    _review(McpTool.objects.get(remote_name="track_shipment").pk, operator)
    Tool.objects.filter(name=TRACK).update(risk_override="LOW", policy_override="NONE")
    _enable_for(requester, TRACK)
    ctx = tool_context(requester, conversation_create(user=requester).pk)
    args = {"tracking_number": "SF1234567890"}

    # when: two calls time out after the request was sent
    first = ToolCallingManager().execute_tool_calls(ctx, assistant(("c1", TRACK, args))).outcomes[0].result
    second = ToolCallingManager().execute_tool_calls(ctx, assistant(("c2", TRACK, args))).outcomes[0].result

    # then: each is OUTCOME_UNKNOWN (never retried), recorded for an administrator
    assert (first.code, second.code) == ("OUTCOME_UNKNOWN", "OUTCOME_UNKNOWN")
    assert first.retryable is False
    statuses = set(IdempotencyRecord.objects.filter(tool_name=TRACK).values_list("status", flat=True))
    assert statuses == {IdempotencyRecord.Status.OUTCOME_UNKNOWN}

    # and: the breaker is open: the third call is answered at once without calling the server
    started = time.monotonic()
    third = ToolCallingManager().execute_tool_calls(ctx, assistant(("c3", TRACK, args))).outcomes[0].result
    assert (third.code, third.retryable) == ("TOOL_UNAVAILABLE", True)
    assert time.monotonic() - started < 1.0
    assert IdempotencyRecord.objects.filter(tool_name=TRACK).count() == 2
    assert audit_rows(tool_name=TRACK)[-1].decision == "REFUSED"
    return [first.code, second.code, third.code]


def test_a_tenants_server_is_invisible_to_another_tenant(db, request, client, requester, outsider, operator,
                                                          executions, globex_admin):
    # given: acme's own server, discovered and reviewed
    server = _server("stdio", request, tenant=requester.tenant)
    server_discover(server_id=server.pk)
    for row in McpTool.objects.all():
        _review(row.pk, operator)
    assign_perm("tools.use_tool", requester, Tool.objects.get(name=TICKET))
    assert TICKET in offered_tools(user=requester)

    # when: someone grants the globex requester the tool and even forces a globex whitelist row
    row = Tool.objects.get(name=TICKET)
    assign_perm("tools.use_tool", outsider, row)
    TenantToolPolicy.objects.create(tenant=outsider.tenant, tool=row, enabled=True)

    # then: globex is never offered it, cannot find it, cannot call it, and its trail names nothing
    assert not any(name.startswith("logistics__") for name in offered_tools(user=outsider))
    ctx = tool_context(outsider, conversation_create(user=outsider).pk)
    result = ToolCallingManager().execute_tool_calls(ctx, assistant(("c1", TICKET, TICKET_ARGS))).outcomes[0].result
    assert result.code == "TOOL_NOT_FOUND" and _lines(executions) == []
    client.force_login(outsider)
    listed = client.get("/api/v1/tools/").json()
    assert not any(t["name"].startswith("logistics__") for t in listed)
    # (the grant and the forced row above are globex's own control-plane rows; discovery, review and
    # the tool's own changes are acme's only)
    kinds = {e.masked_arguments["object"]["type"] for e in AuditEvent.objects.filter(
        tenant=outsider.tenant, tool_name__startswith="logistics__", decision="CONTROL_CHANGE")}
    assert kinds <= {"object_permission", "tenant_tool_policy"}
    assert AuditEvent.objects.filter(tenant=requester.tenant, tool_name=TICKET,
                                     masked_arguments__object__type="mcp_tool").exists()

    # and: the globex administrator sees neither the server nor its tools in the admin
    client.force_login(globex_admin)
    assert client.get(f"/admin/mcp_sources/mcpserver/{server.pk}/change/").status_code == 404
    assert client.get(f"/admin/tools/tool/{row.pk}/change/").status_code == 404


def test_credentials_never_reach_logs_audit_or_other_admins(db, request, client, requester, operator, acme_admin,
                                                            caplog, http_server):
    secret = "sk-mcp-SECRET-4711"
    server = make_server(transport="http", url=http_server.url, tenant=requester.tenant,
                         headers={"Authorization": f"Bearer {secret}", "X-Api-Key": secret}, timeout_seconds=5)
    caplog.set_level(logging.DEBUG)
    server_discover(server_id=server.pk)
    _review(McpTool.objects.get(remote_name="track_shipment").pk, operator)
    Tool.objects.filter(name=TRACK).update(risk_override="LOW", policy_override="NONE")
    assign_perm("tools.use_tool", requester, Tool.objects.get(name=TRACK))
    ctx = tool_context(requester, conversation_create(user=requester).pk)
    ok = ToolCallingManager().execute_tool_calls(
        ctx, assistant(("c1", TRACK, {"tracking_number": "SF1234567890"}))).outcomes[0].result
    assert ok.success and ok.data["receiver_phone"] == "138****5678"  # masked like a local tool's result
    http_server.stop()  # a failing call logs its error
    failed = ToolCallingManager().execute_tool_calls(
        ctx, assistant(("c2", TRACK, {"tracking_number": "SF1234567890"}))).outcomes[0].result
    assert failed.code == "TOOL_UNAVAILABLE"

    assert secret not in caplog.text
    assert secret not in ok.to_json() + failed.to_json()
    for event in AuditEvent.objects.all():
        assert secret not in json.dumps({f.attname: getattr(event, f.attname) for f in event._meta.concrete_fields},
                                        default=str)
    # Only platform operators read credentials in the admin.
    client.force_login(acme_admin)
    page = client.get(f"/admin/mcp_sources/mcpserver/{server.pk}/change/")
    assert page.status_code == 200 and secret not in page.content.decode()
    client.force_login(operator)
    assert secret in client.get(f"/admin/mcp_sources/mcpserver/{server.pk}/change/").content.decode()


def test_oauth_client_credentials_token_is_cached_and_never_logged(db, http_server, caplog):
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    hits = []

    class TokenEndpoint(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            hits.append((self.headers.get("Authorization"), body))
            payload = json.dumps({"access_token": "at-SECRET-9911", "token_type": "Bearer",
                                  "expires_in": 3600}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    endpoint = HTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    try:
        caplog.set_level(logging.DEBUG)
        server = make_server(transport="http", url=http_server.url, oauth_client_id="platform",
                             oauth_client_secret="cs-SECRET-5150", oauth_scopes="tools:read tools:call",
                             oauth_token_url=f"http://127.0.0.1:{endpoint.server_port}/token")
        assert server_discover(server_id=server.pk).error == ""
        assert server_discover(server_id=server.pk).error == ""
    finally:
        endpoint.shutdown()

    # one token for both discoveries (cached), asked with the client's credentials and scopes
    assert len(hits) == 1
    assert hits[0][0] == "Basic " + base64.b64encode(b"platform:cs-SECRET-5150").decode()
    assert "grant_type=client_credentials" in hits[0][1] and "scope=tools%3Aread+tools%3Acall" in hits[0][1]
    for secret in ("at-SECRET-9911", "cs-SECRET-5150"):
        assert secret not in caplog.text
        assert not AuditEvent.objects.filter(masked_arguments__icontains=secret).exists()


def test_a_confirmed_call_to_a_server_disabled_meanwhile_is_refused_not_left_confirmed(
        db, request, requester, operator, executions):
    # given: a reviewed remote tool whose call the requester confirmed
    from mcp_sources.models import McpServer

    server = _server("stdio", request)
    server_discover(server_id=server.pk)
    ticket = Tool.objects.get(name=TICKET)
    _review(McpTool.objects.get(tool=ticket).pk, operator)
    _enable_for(requester, TICKET)
    conversation = conversation_create(user=requester)
    message = assistant(("call_1", TICKET, TICKET_ARGS))
    pending = ToolCallingManager().execute_tool_calls(tool_context(requester, conversation.pk), message).pending[0]
    requester_actions.confirmation_confirm(token=pending.token, user=requester)

    # when: the server is disabled before the confirmed call goes out
    McpServer.objects.filter(pk=server.pk).update(enabled=False)
    ctx = tool_context(requester, conversation.pk, confirmations={"call_1": pending.confirmation_id})
    result = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result

    # then: nothing is sent, and the decision ends REFUSED with the code (the run moves on past
    # this call, so it could never be used again; it must not read "approved, waiting to run")
    assert (result.success, result.code) == (False, "TOOL_UNAVAILABLE") and _lines(executions) == []
    request_row = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request_row.status, request_row.outcome_code) == ("REFUSED", "TOOL_UNAVAILABLE")
    assert [r.decision for r in audit_rows(tool_name=TICKET)][-1] == "REFUSED"


def test_a_colleagues_call_to_a_disabled_server_does_not_burn_my_confirmation(
        db, request, requester, operator, executions):
    # given: the requester confirmed a remote call; a colleague of the same tenant with the same grants
    from django.contrib.auth.models import Permission

    from agentplatform.tenancy.models import User
    from mcp_sources.models import McpServer

    server = _server("stdio", request)
    server_discover(server_id=server.pk)
    _review(McpTool.objects.get(tool=Tool.objects.get(name=TICKET)).pk, operator)
    _enable_for(requester, TICKET)
    colleague = User.objects.create(username="acme-requester2", tenant=requester.tenant)
    colleague.user_permissions.add(*Permission.objects.filter(content_type__app_label="catalog"))
    _enable_for(colleague, TICKET)
    conversation = conversation_create(user=requester)
    message = assistant(("call_1", TICKET, TICKET_ARGS))
    pending = ToolCallingManager().execute_tool_calls(tool_context(requester, conversation.pk), message).pending[0]
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    McpServer.objects.filter(pk=server.pk).update(enabled=False)

    # when: the colleague presents the request in their own call
    ctx = tool_context(User.objects.get(pk=colleague.pk), conversation.pk,
                       confirmations={"call_1": pending.confirmation_id})
    result = ToolCallingManager().execute_tool_calls(ctx, message).outcomes[0].result

    # then: refused, nothing sent, and the requester's decision is intact
    assert not result.success and _lines(executions) == []
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == "CONFIRMED"
