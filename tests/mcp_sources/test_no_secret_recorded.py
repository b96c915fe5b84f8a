"""Nothing secret of an MCP server enters the trail (docs/remote_tools.md, "What is recorded of a
server"): servers registered with a secret in the URL's query, in its userinfo, in a header value,
in a stdio argument and in an environment value go through discovery, review, a call and a failed
connection; then every exit is searched for each secret: the log lines the platform writes, every
field of every audit row, the CSV and JSON Lines exports, run events, what the model was sent, and
the admin pages a tenant administrator reads."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import sys

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm

from core.redaction.endpoints import safe_url, scrub_urls, url_record
from agentplatform.ops.logs import CorrelationFilter, JsonFormatter, RedactingFilter
from core.redaction.text import MaskingFilter
from agentplatform.runtime import services as runtime
from agentplatform.runtime.models import RunEvent
from audit.models import AuditEvent
from mcp_sources.models import McpServer, McpTool
from tests.api.conftest import authorization_header
from tests.llm.fake_openai_server import completion, function_call, json_response
from tests.mcp_sources.conftest import OWNER, ROOT
from tools.models import Tool

QUERY = "qs7f3a9c1e5b2d4680"
USER, PASSWORD = "usr5d2c81", "pw19c3e5a7b9d1f2e4"
HEADER = "hv2b4d6f8a0c1e3579"
ARGUMENT = "arg8e6c4a2019f7d5b3"
ENVIRONMENT = "env4c6e8a0b2d1f3579"
SECRETS = (QUERY, USER, PASSWORD, HEADER, ARGUMENT, ENVIRONMENT)
HTTP_TRACK, STDIO_TRACK = "parcels__track_shipment", "parcels_cli__track_shipment"


@contextlib.contextmanager
def _platform_log():
    """What the platform's log handler writes meanwhile (settings.LOGGING's filters and formatter),
    with every logger at DEBUG, the SDK's and httpx's included (the worst an operator can choose)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    for each in (CorrelationFilter(), MaskingFilter(), RedactingFilter()):
        handler.addFilter(each)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger(name) for name in ("", "mcp", "httpx2", "httpcore2", "httpx", "httpcore")]
    levels = [each.level for each in loggers]
    root = loggers[0]
    root.addHandler(handler)
    for each in loggers:
        each.setLevel(logging.DEBUG)
    try:
        yield stream.getvalue
    finally:
        root.removeHandler(handler)
        for each, level in zip(loggers, levels):
            each.setLevel(level)


def _absent(where: str, text: str) -> None:
    found = [s for s in SECRETS if s in text]
    assert not found, f"{found} in {where}"


def test_the_url_sanitiser():
    url = f"https://{USER}:{PASSWORD}@mcp.example.com:8443/v1/mcp?api_key={QUERY}#frag"
    record = url_record(url)
    assert record["url"] == "https://mcp.example.com:8443/v1/mcp" and len(record["url_rest_digest"]) == 16
    assert url_record(url.replace(QUERY, "other"))["url_rest_digest"] != record["url_rest_digest"]  # a change shows
    assert url_record("https://mcp.example.com/mcp") == {"url": "https://mcp.example.com/mcp", "url_rest_digest": ""}
    assert safe_url("https://hooks.example.com/services/T0/B0/XYZ", keep_path=False).startswith(
        "https://hooks.example.com [redacted ")
    assert safe_url("http://[::1]:9/x?k=1").startswith("http://[::1]:9/x [redacted ")
    text = scrub_urls(f"Client error '401' for url '{url}'. See https://docs.example.com/x.")
    _absent("scrubbed text", text)
    assert "'https://mcp.example.com:8443/v1/mcp [redacted " in text and "https://docs.example.com/x." in text


@pytest.mark.django_db(transaction=False)
def test_no_secret_of_a_server_reaches_any_exit(db, client, requester, operator, acme_admin, http_server,
                                                scripted_model, caplog):
    with _platform_log() as platform_log:
        caplog.set_level(logging.DEBUG)
        # given: two servers of acme registered with a secret in every place one can go
        url = http_server.url.replace("http://", f"http://{USER}:{PASSWORD}@") + f"?k={QUERY}#frag"
        web = McpServer(name="parcels", tenant=requester.tenant, transport="http", url=url, owner=OWNER,
                        headers={"X-Api-Key": HEADER}, timeout_seconds=5)
        cli = McpServer(name="parcels_cli", tenant=requester.tenant, transport="stdio", owner=OWNER,
                        command=sys.executable, args=["-m", "mcp_sources.demo_server", "stdio", f"--token={ARGUMENT}"],
                        env={"PYTHONPATH": str(ROOT), "DEMO_TOKEN": ENVIRONMENT}, timeout_seconds=20)
        for server in (web, cli):
            server.full_clean()
            server.save()
        web.url = url.replace(QUERY, QUERY[::-1])  # a change of the secret is a CHANGED row
        web.save()
        web.url = url
        web.save()

        # when: the operator discovers and reviews in the admin
        client.force_login(operator)
        changelist = "/admin/mcp_sources/mcpserver/"
        client.post(changelist, {"action": "discover_tools", "_selected_action": [web.pk, cli.pk]})
        rows = list(McpTool.objects.filter(remote_name="track_shipment"))
        assert len(rows) == 2
        response = client.post("/admin/mcp_sources/mcptool/", {
            "action": "review_and_enable", "_selected_action": [r.pk for r in rows], "confirm": "yes",
            **{f"definition_hash_{r.pk}": r.definition_hash for r in rows}}, follow=True)
        assert response.status_code == 200
        Tool.objects.filter(name__in=[HTTP_TRACK, STDIO_TRACK]).update(risk_override="LOW", policy_override="NONE")
        for name in (HTTP_TRACK, STDIO_TRACK):
            assign_perm("tools.use_tool", requester, Tool.objects.get(name=name, enabled=True))

        # and: the requester's run calls both, then one again after the web server went away
        arguments = '{"tracking_number": "SF1234567890"}'
        scripted_model.enqueue(
            json_response(completion(tool_calls=[function_call("call_1", HTTP_TRACK, arguments),
                                                 function_call("call_2", STDIO_TRACK, arguments)],
                                     finish_reason="tool_calls")),
            json_response(completion(content="The parcel is in transit.")),
            json_response(completion(tool_calls=[function_call("call_3", HTTP_TRACK, arguments)],
                                     finish_reason="tool_calls")),
            json_response(completion(content="The carrier cannot be reached.")),
        )
        first = runtime.chat_send(user=requester, message="Where is parcel SF1234567890?")
        tool_messages = [m for m in scripted_model.requests[1].body["messages"] if m["role"] == "tool"]
        assert all(json.loads(m["content"])["success"] for m in tool_messages), tool_messages
        http_server.stop()
        second = runtime.chat_send(user=requester, message="And now?", conversation_id=first.run.conversation_id)
        failed = [json.loads(m["content"]) for m in scripted_model.requests[3].body["messages"] if m["role"] == "tool"]
        assert failed[-1]["code"] == "TOOL_UNAVAILABLE"
        discovery = client.post(changelist, {"action": "discover_tools", "_selected_action": [web.pk]}, follow=True)
        web.refresh_from_db()
        assert web.last_error.startswith("discovery failed")
        _absent("the operator's message of a failed discovery", discovery.content.decode())

        # then: no exit holds a secret
        _absent("the platform's log", platform_log())
        ours = [r for r in caplog.records if r.name.split(".")[0] in
                ("agentplatform", "mcp_sources", "tools", "approvals", "audit", "notifications")]
        _absent("our own log records", "\n".join(r.getMessage() for r in ours))
    for event in AuditEvent.objects.all():
        _absent(f"audit row {event.decision} {event.message[:60]}", json.dumps(
            {f.attname: getattr(event, f.attname) for f in event._meta.concrete_fields}, default=str,
            ensure_ascii=False))
    created = AuditEvent.objects.filter(decision="CONTROL_CHANGE", masked_arguments__object__type="mcp_server",
                                        status="CREATED", tenant=requester.tenant)
    recorded = {row.masked_arguments["object"]["id"]: row.masked_arguments["new"] for row in created}
    assert recorded["parcels"]["url"] == http_server.url and recorded["parcels"]["url_rest_digest"]
    assert recorded["parcels"]["headers"] == ["X-Api-Key"] and recorded["parcels_cli"]["env"] == ["DEMO_TOKEN",
                                                                                                   "PYTHONPATH"]
    assert recorded["parcels_cli"]["command_line_digest"] and "args" not in recorded["parcels_cli"]
    changed = AuditEvent.objects.filter(decision="CONTROL_CHANGE", masked_arguments__object__type="mcp_server",
                                        status="CHANGED", tenant=requester.tenant).first()
    assert changed.masked_arguments["new"].keys() == {"url_rest_digest"}  # the change shows, not the secret
    for run in (first.run, second.run):
        for event in RunEvent.objects.filter(run=run):
            _absent(f"run event {event.type}", json.dumps(event.payload, default=str, ensure_ascii=False))
    for request in scripted_model.requests:
        _absent("a request to the model", json.dumps(request.body, ensure_ascii=False))

    # the exports a tenant administrator downloads
    acme_admin.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=authorization_header(acme_admin))
    for fmt in ("csv", "jsonl"):
        response = api.get(f"/api/v1/audit-events/?format={fmt}")
        assert response.status_code == 200
        body = b"".join(response.streaming_content).decode("utf-8")
        assert "mcp_server" in body
        _absent(f"the {fmt} export", body)
    listed = api.get("/api/v1/audit-events/?page_size=500").content.decode()
    _absent("the audit API", listed)

    # the admin pages a tenant administrator reads
    client.force_login(acme_admin)
    pages = ["/admin/mcp_sources/mcpserver/", "/admin/mcp_sources/mcptool/", "/admin/audit/auditevent/",
             "/admin/tools/tool/"]
    for server in (web, cli):
        pages += [f"/admin/mcp_sources/mcpserver/{server.pk}/change/", f"/admin/mcp_sources/mcpserver/{server.pk}/history/"]
    pages += [f"/admin/mcp_sources/mcptool/{row.pk}/change/" for row in McpTool.objects.all()]
    pages += [f"/admin/audit/auditevent/{event.pk}/change/" for event in AuditEvent.objects.filter(
        tenant=requester.tenant, decision="CONTROL_CHANGE", masked_arguments__object__type="mcp_server")]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        _absent(f"the tenant administrator's page {page}", response.content.decode())
    # a search cannot probe the URL either
    found = client.get("/admin/mcp_sources/mcpserver/", {"q": QUERY[:6]}).content.decode()
    assert f"/admin/mcp_sources/mcpserver/{web.pk}/change/" not in found
    # the operator still reads the URL as typed (credentials are theirs)
    client.force_login(operator)
    assert QUERY in client.get(f"/admin/mcp_sources/mcpserver/{web.pk}/change/").content.decode()


def test_rows_written_before_the_rule_are_shown_without_their_secrets(db, client, requester, acme_admin, monkeypatch):
    # given: control-change rows as the trail recorded a server before (URL as typed, command line;
    # messages were not yet scrubbed of URL secrets on the way in)
    from audit import events

    monkeypatch.setattr(events, "scrub_urls", lambda text: text)

    typed = f"https://{USER}:{PASSWORD}@mcp.example.com/mcp?api_key={QUERY}"
    created = {"tenant": "acme", "transport": "stdio", "url": typed, "command": "/usr/bin/crm",
               "args": [f"--token={ARGUMENT}"], "headers": ["X-Api-Key"], "env": ["DEMO_TOKEN"],
               "oauth_client_id": HEADER}
    events.control_change_recorded(tenant_id=requester.tenant_id, status="CREATED",
                                   masked_arguments={"object": {"type": "mcp_server", "id": "crm"}, "old": None, "new": created},
                                   message="mcp_server crm created")
    old, new = {"url": typed, "args": ["--token=old"]}, {"url": typed.replace(QUERY, "x"), "args": [f"--token={ARGUMENT}"]}
    events.control_change_recorded(tenant_id=requester.tenant_id, status="CHANGED",
                                   masked_arguments={"object": {"type": "mcp_server", "id": "crm"}, "old": old, "new": new},
                                   message="mcp_server crm changed: " + ", ".join(f"{k}: {old[k]!r} -> {new[k]!r}" for k in new))
    rows = AuditEvent.objects.filter(masked_arguments__object__type="mcp_server")
    assert any(QUERY in row.message for row in rows)  # the rows themselves stay as written (append-only)

    # then: the exports, the audit API and the audit admin show them without the secrets
    acme_admin.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=authorization_header(acme_admin))
    for path in ("/api/v1/audit-events/?format=csv", "/api/v1/audit-events/?format=jsonl"):
        body = b"".join(api.get(path).streaming_content).decode("utf-8")
        assert "mcp.example.com/mcp" in body and "command_line_digest" in body
        _absent(path, body)
    listed = api.get("/api/v1/audit-events/?kind=control&page_size=500").json()["results"]
    shown = [r for r in listed if (r["masked_arguments"] or {}).get("object", {}).get("type") == "mcp_server"]
    assert len(shown) == 2 and "args_digest" in json.dumps(shown)
    _absent("the audit API", json.dumps(shown))
    client.force_login(acme_admin)
    for row in rows:
        page = client.get(f"/admin/audit/auditevent/{row.pk}/change/")
        assert page.status_code == 200
        _absent("the audit admin", page.content.decode())
