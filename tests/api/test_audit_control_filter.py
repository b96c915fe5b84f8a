"""The auditor filters and exports control-plane changes."""
from __future__ import annotations

import json

from audit import events
from tests.api.test_audit import auditor, body_of


def _control(user, kind: str, ident: str):
    return events.control_change_recorded(tenant_id=user.tenant_id, actor_id=user.pk, status="CHANGED",
                                          masked_arguments={"object": {"type": kind, "id": ident},
                                                            "old": {"enabled": True}, "new": {"enabled": False}},
                                          message=f"{kind} {ident} changed")


def test_control_plane_changes_are_filtered_and_exported(api, approver1, requester, outsider):
    _control(requester, "tenant_tool", "acme/cancel_order")
    _control(requester, "grant", "use_tool acme-requester")
    _control(outsider, "tenant_tool", "globex/cancel_order")
    events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="EXECUTED",
                             tool_name="list_orders")
    client = api(auditor(approver1))

    control = client.get("/api/v1/audit-events/?kind=control&page_size=500").json()["results"]
    # (the seed, the auditor's grant and the client's API key are control-plane changes too)
    control = [r for r in control if r["masked_arguments"]["object"]["type"] in ("tenant_tool", "grant")]
    assert [r["message"] for r in control] == ["grant use_tool acme-requester changed", "tenant_tool acme/cancel_order changed"]
    tools = client.get("/api/v1/audit-events/?kind=tool").json()["results"]
    assert tools and all(r["decision"] != "CONTROL_CHANGE" for r in tools)
    whitelist = client.get("/api/v1/audit-events/?object_type=tenant_tool&page_size=500").json()["results"]
    assert [r["masked_arguments"]["old"] for r in whitelist] == [{"enabled": True}]

    lines = [json.loads(line) for line in
             body_of(client.get("/api/v1/audit-events/?kind=control&format=jsonl")).splitlines()]
    assert [r["masked_arguments"]["object"]["id"] for r in lines
            if r["masked_arguments"]["object"]["type"] in ("tenant_tool", "grant")] == \
        ["acme/cancel_order", "use_tool acme-requester"]
    csv_body = body_of(client.get("/api/v1/audit-events/?object_type=grant&format=csv"))
    assert "use_tool acme-requester" in csv_body and "cancel_order" not in csv_body
