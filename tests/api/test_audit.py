"""GET /api/v1/audit-events/: permission, tenant scope, filters, pagination and exports."""
from __future__ import annotations

import csv
import datetime
import io
import json

from django.contrib.auth.models import Permission

from core import clock
from agentplatform.runtime import services
from audit import events
from audit.models import AuditEvent
from tests.api.conftest import CANCEL_ORDER, assert_error


def auditor(user):
    user.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    return user


def body_of(response) -> str:
    return b"".join(response.streaming_content).decode("utf-8")


def test_without_the_audit_permission_it_is_403(api, requester, approver1):
    for user in (requester, approver1):
        assert_error(api(user).get("/api/v1/audit-events/"), 403, "PERMISSION_DENIED")
        assert_error(api(user).get("/api/v1/audit-events/?format=csv"), 403, "PERMISSION_DENIED")


def test_lists_my_tenants_events_newest_first(api, approver1, acme_admin, requester, outsider, cancel_pending):
    services.chat_send(user=outsider, message="Please cancel order A202607300001 because it is late")
    for reader in (auditor(approver1), acme_admin):
        page = api(reader).get("/api/v1/audit-events/?kind=tool&page_size=500").json()  # (issuing API keys is audited too)
        rows = page["results"]
        expected = AuditEvent.objects.filter(tenant=requester.tenant).exclude(decision="CONTROL_CHANGE").count()
        assert len(rows) == expected > 0
        # tool-call rows are the requester's; the seed's control-plane rows have no actor (docs/roles.md)
        assert {r["actor"] for r in rows if r["decision"] != "CONTROL_CHANGE"} == {requester.username}
        times = [r["occurred_at"] for r in rows]
        assert times == sorted(times, reverse=True)
        assert not any("A202607300001" in json.dumps(r) for r in rows)  # globex's events stay there


def test_filters(api, approver1, requester, cancel_pending):
    services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?")
    client = api(auditor(approver1))
    rows = client.get("/api/v1/audit-events/?tool=cancel_order").json()["results"]
    assert rows and {r["tool_name"] for r in rows} == {"cancel_order"}
    rows = client.get("/api/v1/audit-events/?decision=CONFIRMATION_REQUIRED").json()["results"]
    assert [r["masked_arguments"]["order_id"] for r in rows] == [CANCEL_ORDER]
    rows = client.get("/api/v1/audit-events/?status=CONFIRMATION_REQUIRED&user=acme-requester").json()["results"]
    assert len(rows) == 1
    assert client.get("/api/v1/audit-events/?user=acme-approver2").json()["results"] == []
    future = (clock.now() + datetime.timedelta(hours=1)).isoformat()
    assert client.get("/api/v1/audit-events/", {"from": future}).json()["results"] == []
    assert len(client.get("/api/v1/audit-events/", {"to": future}).json()["results"]) == \
        AuditEvent.objects.filter(tenant=requester.tenant).count()


def test_bad_filters_are_400(api, approver1):
    client = api(auditor(approver1))
    assert_error(client.get("/api/v1/audit-events/?from=yesterday"), 400, "INVALID_ARGUMENTS")
    assert_error(client.get("/api/v1/audit-events/?decision=MAYBE"), 400, "INVALID_ARGUMENTS")
    assert_error(client.get("/api/v1/audit-events/", {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}),
                 400, "INVALID_ARGUMENTS")
    assert_error(client.get("/api/v1/audit-events/?format=xml"), 400, "INVALID_ARGUMENTS")  # format is an enum


def test_cursor_pagination_walks_every_event_once(api, approver1, requester):
    for i in range(7):
        events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="EXECUTED",
                                 tool_name="query_inventory", status="OK", message=f"row {i}")
    client = api(auditor(approver1))
    seen, url = [], "/api/v1/audit-events/?page_size=3&kind=tool"
    while url:
        page = client.get(url).json()
        seen += [r["message"] for r in page["results"] if r["decision"] != "CONTROL_CHANGE"]  # the seed's
        url = page["next"]
    assert seen == [f"row {i}" for i in reversed(range(7))]


def test_jsonl_export_streams_every_matching_event_oldest_first(api, approver1, requester, cancel_pending):
    response = api(auditor(approver1)).get("/api/v1/audit-events/?format=jsonl&tool=cancel_order")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert "attachment" in response["Content-Disposition"]
    lines = [json.loads(line) for line in body_of(response).splitlines()]
    expected = AuditEvent.objects.filter(tenant=requester.tenant, tool_name="cancel_order").order_by(
        "occurred_at", "id")
    assert [r["id"] for r in lines] == [str(e.id) for e in expected]
    assert cancel_pending.pending[0].token not in json.dumps(lines)


def test_csv_export_by_accept_header_neutralises_formulas(api, approver1, requester):
    events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="INVALID",
                             tool_name="cancel_order", status="INVALID_ARGUMENTS",
                             masked_arguments={"reason": "=HYPERLINK(\"http://x\")"}, message="=1+1")
    response = api(auditor(approver1)).get("/api/v1/audit-events/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body_of(response))))
    [row] = [r for r in rows if r["decision"] == "INVALID"]
    assert row["message"] == "'=1+1"
    assert json.loads(row["masked_arguments"]) == {"reason": "=HYPERLINK(\"http://x\")"}  # JSON cells start with {
    assert row["actor"] == requester.username


def test_export_is_complete_beyond_one_batch(api, approver1, requester, monkeypatch):
    from audit import export  # the rows and batches of the API's export live there

    monkeypatch.setattr(export, "EXPORT_BATCH", 4)
    for i in range(10):
        events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="EXECUTED",
                                 message=f"m{i}")
    lines = body_of(api(auditor(approver1)).get("/api/v1/audit-events/?format=jsonl&kind=tool")).splitlines()
    assert [json.loads(line)["message"] for line in lines] == [f"m{i}" for i in range(10)]
