"""Hostile input from outside at /mcp/: bodies nested too deep for a JSON parser, arguments nested
deep inside a tools/call, batches and JSON that is not JSON-RPC. Each gets a JSON-RPC or tool error
with a stable code (never a 500) and changes nothing stored."""
from __future__ import annotations

import json

import pytest

from tests.mcp_server.conftest import RawSession, issue_key, raw_post


def _stored() -> tuple[int, int, int]:
    from agentplatform.mcp_server.models import McpCall
    from approvals.models import ConfirmationRequest
    from audit.models import AuditEvent

    return AuditEvent.objects.count(), ConfirmationRequest.objects.count(), McpCall.objects.count()


@pytest.mark.parametrize("depth", [2_000, 40_000])  # 40 000 deep stays under MCP_MAX_BODY_BYTES
def test_a_body_nested_too_deep_is_a_parse_error(mcp_live, requester, depth):
    key = issue_key(requester)
    session = RawSession(mcp_live.url, key)
    before = _stored()
    for body in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
        response = raw_post(mcp_live.url, body, key=key, headers=session.headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == -32700 and error["data"]["code"] == "PARSE_ERROR"
    assert _stored() == before
    # the session still serves
    assert "tools" in session.request("tools/list")["result"]


def test_arguments_nested_deep_are_refused_with_a_code(mcp_live, requester):
    key = issue_key(requester)
    session = RawSession(mcp_live.url, key)
    before = _stored()
    for depth in (50, 400, 900):
        arguments = {"status": "PAID"}
        inner = arguments
        for _ in range(depth):
            inner["x"] = {}
            inner = inner["x"]
        answer = session.request("tools/call", {"name": "list_orders", "arguments": arguments})
        code = answer["result"]["structuredContent"]["code"] if "result" in answer else answer["error"]["data"]["code"]
        assert code in {"INVALID_ARGUMENTS", "INVALID_PARAMS", "PARSE_ERROR"}, answer
    assert _stored()[1:] == before[1:]


def test_batches_and_non_json_rpc_json_are_refused_with_a_code(mcp_live, requester):
    key = issue_key(requester)
    session = RawSession(mcp_live.url, key)
    before = _stored()
    batch = [{"jsonrpc": "2.0", "id": 10, "method": "tools/call",
              "params": {"name": "cancel_order", "arguments": {"order_id": "A202607290001", "reason": "r"}}},
             {"jsonrpc": "2.0", "id": 11, "method": "tools/list"}]
    bodies = [json.dumps(batch).encode(), b"123", b'"x"', b"null", b"[]", b'{"jsonrpc":"2.0"}',
              b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}']
    for body in bodies:
        response = raw_post(mcp_live.url, body, key=key, headers=session.headers)
        assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
        assert response.json()["error"]["data"]["code"], body
    # An id that is neither a string nor an integer (the SDK would take it for a notification and
    # answer 202 with nothing): 400 INVALID_REQUEST, and nothing runs.
    for odd_id in ({"a": 1}, [1], True, 1.5):
        odd = {"jsonrpc": "2.0", "id": odd_id, "method": "tools/call", "params": batch[0]["params"]}
        response = raw_post(mcp_live.url, odd, key=key, headers=session.headers)
        assert response.status_code == 400, (odd_id, response.status_code, response.text)
        error = response.json()["error"]
        assert error["code"] == -32600 and error["data"]["code"] == "INVALID_REQUEST", odd_id
    assert _stored() == before
    # string and integer ids still serve
    for good_id in ("req-1", 7):
        answer = raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": good_id, "method": "tools/list"}, key=key,
                          headers=session.headers)
        assert answer.status_code == 200, answer.text


def test_wrong_content_types_and_huge_or_mistyped_arguments_are_refused(mcp_live, requester):
    key = issue_key(requester)
    session = RawSession(mcp_live.url, key)
    before = _stored()
    listing = json.dumps({"jsonrpc": "2.0", "id": 12, "method": "tools/list"}).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
        response = raw_post(mcp_live.url, listing, key=key, headers={**session.headers, "Content-Type": content_type})
        assert response.status_code == 400 and response.json()["error"]["data"]["code"] == "INVALID_REQUEST"
    cases = [("cancel_order", {"order_id": "A202607290001", "reason": "x" * 200_000}),
             ("cancel_order", {"order_id": "A202607290001", "reason": "x" * 5_000}),
             ("list_orders", {"status": ["PAID"]}), ("list_orders", {"status": 10**30})]
    for name, arguments in cases:
        answer = session.request("tools/call", {"name": name, "arguments": arguments})["result"]
        assert answer["isError"] is True and answer["structuredContent"]["code"] == "INVALID_ARGUMENTS"
    assert _stored()[1:] == before[1:]
