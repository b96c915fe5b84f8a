"""Text PostgreSQL cannot store (NUL: core.text) arriving over MCP where no
argument validation sees it: the tool's name and the client's own clientInfo. Each is cleaned as
the model loop cleans a model's text: an unknown tool answers TOOL_NOT_FOUND (audited), a client
whose name holds such text still calls, and nothing ends as INTERNAL_ERROR. Fails on PostgreSQL
without the cleaning (SQLite stores both)."""
from __future__ import annotations

from tests.mcp_server.conftest import INIT, issue_key, raw_post


def _session(url: str, key: str, client_name: str) -> dict[str, str]:
    init = {**INIT, "params": {**INIT["params"], "clientInfo": {"name": client_name, "version": "1\x00"}}}
    opened = raw_post(url, init, key=key)
    assert opened.status_code == 200, opened.text
    headers = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    raw_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, key=key, headers=headers)
    return headers


def _call(url: str, key: str, headers: dict[str, str], name: str, arguments: dict, request_id: int) -> dict:
    import json

    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    response = raw_post(url, body, key=key, headers={**headers, "Accept": "application/json, text/event-stream"})
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])
    return response.json()


def test_a_tool_name_with_nul_or_a_lone_surrogate_is_tool_not_found(mcp_live, requester):
    from audit.models import AuditEvent

    key = issue_key(requester)
    headers = _session(mcp_live.url, key, "plain")
    for index, name in enumerate(["list\x00orders", "\x00"]):
        answer = _call(mcp_live.url, key, headers, name, {}, 10 + index)
        assert "result" in answer, answer
        assert answer["result"]["isError"] is True
        assert answer["result"]["structuredContent"]["code"] == "TOOL_NOT_FOUND"
    assert AuditEvent.objects.filter(tool_name="list\ufffdorders").exists()
    # A lone surrogate never reaches a handler: the SDK's JSON parser refuses it.
    surrogate = _call(mcp_live.url, key, headers, "list_orders\ud800", {}, 30)
    assert surrogate["error"]["data"]["code"] == "PARSE_ERROR"


def test_a_client_name_with_nul_still_calls_and_is_stored_cleaned(mcp_live, requester):
    from audit.models import AuditEvent

    key = issue_key(requester, name="nul client")
    headers = _session(mcp_live.url, key, "evil\x00client")
    answer = _call(mcp_live.url, key, headers, "list_orders", {"status": "PAID"}, 20)
    assert answer["result"]["isError"] is False, answer
    gated = _call(mcp_live.url, key, headers, "cancel_order", {"order_id": "A202607290001", "reason": "r"}, 21)
    assert gated["result"]["structuredContent"]["status"] == "pending", gated
    channels = [event.channel for event in AuditEvent.objects.exclude(channel=None) if event.channel]
    assert channels and all(channel["client"] == "evil\ufffdclient/1\ufffd" for channel in channels)


CARD, PHONE = "4111111111111111", "13812345678"


def test_a_card_or_phone_in_a_tool_name_or_the_client_name_never_reaches_a_row(mcp_live, requester):
    import json

    from agentplatform.mcp_server.models import McpCall
    from audit.models import AuditEvent

    key = issue_key(requester, name="masked client")
    headers = _session(mcp_live.url, key, f"agent of {PHONE}")
    for index, name in enumerate([f"refund {CARD}", f"call {PHONE}", CARD]):
        answer = _call(mcp_live.url, key, headers, name, {}, 40 + index)
        assert answer["result"]["structuredContent"]["code"] == "TOOL_NOT_FOUND", answer
        assert CARD not in json.dumps(answer) and PHONE not in json.dumps(answer)
    ran = _call(mcp_live.url, key, headers, "list_orders", {"status": "PAID"}, 50)
    assert ran["result"]["isError"] is False, ran
    stored = json.dumps([list(AuditEvent.objects.values()), list(McpCall.objects.values())], default=str)
    assert CARD not in stored and PHONE not in stored
    assert AuditEvent.objects.filter(channel__client__startswith="agent of 138").exists()
