"""Who may talk to /mcp/: the platform API key as a bearer token, checked before any MCP message;
bodies too large or not JSON refused with stable codes; nothing stored changes."""
from __future__ import annotations

import datetime

import httpx
import pytest
from django.utils import timezone

from tests.mcp_server.conftest import INIT, issue_key, raw_post


def _stored(requester):
    from agentplatform.mcp_server.models import McpCall
    from approvals.models import ConfirmationRequest
    from audit.models import AuditEvent

    return (McpCall.objects.count(), ConfirmationRequest.objects.count(),
            AuditEvent.objects.count())


def _refused(response, code: str) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["code"] == code
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_no_header_is_not_authenticated(mcp_live, requester):
    response = raw_post(mcp_live.url, INIT)
    _refused(response, "NOT_AUTHENTICATED")
    assert "mcp-session-id" not in response.headers  # no session was opened


@pytest.mark.parametrize("header", ["Token abc", "Bearer", "Bearer a b", "Basic Zm9vOmJhcg=="])
def test_malformed_header_is_not_authenticated(mcp_live, requester, header):
    key = issue_key(requester)
    response = raw_post(mcp_live.url, INIT, headers={"Authorization": header.replace("abc", key)})
    _refused(response, "NOT_AUTHENTICATED")
    assert key not in response.text


def test_unknown_key_fails(mcp_live, requester):
    _refused(raw_post(mcp_live.url, INIT, key="0" * 64), "AUTHENTICATION_FAILED")


def test_revoked_key_fails(mcp_live, requester):
    from agentplatform.api.models import ApiKey
    from agentplatform.tenancy.credentials import api_key_revoke

    key = issue_key(requester)
    assert raw_post(mcp_live.url, INIT, key=key).status_code == 200
    api_key_revoke(public_id=ApiKey.objects.get(user=requester).public_id, actor=requester)
    response = raw_post(mcp_live.url, INIT, key=key)
    _refused(response, "AUTHENTICATION_FAILED")
    assert key not in response.text


def test_expired_key_fails(mcp_live, requester):
    from agentplatform.api.models import ApiKey

    key = issue_key(requester)
    ApiKey.objects.filter(user=requester).update(expiry=timezone.now() - datetime.timedelta(seconds=1))
    _refused(raw_post(mcp_live.url, INIT, key=key), "AUTHENTICATION_FAILED")


def test_inactive_user_fails(mcp_live, requester):
    key = issue_key(requester)
    type(requester).objects.filter(pk=requester.pk).update(is_active=False)
    _refused(raw_post(mcp_live.url, INIT, key=key), "AUTHENTICATION_FAILED")


def test_user_without_tenant_is_refused(mcp_live, operator):
    key = issue_key(operator)
    response = raw_post(mcp_live.url, INIT, key=key)
    _refused(response, "NO_TENANT")
    assert "mcp-session-id" not in response.headers and key not in response.text


def test_valid_key_initializes(mcp_live, requester):
    response = raw_post(mcp_live.url, INIT, key=issue_key(requester))
    assert response.status_code == 200, response.text
    assert response.headers.get("mcp-session-id")
    assert '"listChanged":true' in response.text.replace(" ", "")


def test_oversized_body_is_refused(mcp_live, requester, settings):
    key = issue_key(requester)
    before = _stored(requester)
    big = {**INIT, "params": {**INIT["params"], "padding": "x" * (settings.MCP_MAX_BODY_BYTES + 10)}}
    response = raw_post(mcp_live.url, big, key=key)
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert _stored(requester) == before


def test_a_body_larger_than_its_content_length_is_refused(mcp_live, requester, settings):
    key = issue_key(requester)
    body = b'{"padding": "' + b"x" * (settings.MCP_MAX_BODY_BYTES + 10) + b'"}'

    def chunks():  # chunked transfer: no Content-Length at all
        for start in range(0, len(body), 65536):
            yield body[start:start + 65536]

    response = httpx.post(mcp_live.url, content=chunks(), timeout=30,
                          headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                   "Accept": "application/json, text/event-stream"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"


def test_malformed_json_is_a_parse_error(mcp_live, requester):
    key = issue_key(requester)
    before = _stored(requester)
    response = raw_post(mcp_live.url, b'{"jsonrpc": "2.0", "id": 1, "method": ', key=key)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32700 and error["data"]["code"] == "PARSE_ERROR"
    assert _stored(requester) == before


def test_transport_refusals_carry_stable_codes(mcp_live, requester):
    key = issue_key(requester)
    cases = [
        (INIT, {"Accept": "text/html"}, 406, "NOT_ACCEPTABLE"),
        (INIT, {"Host": "evil.example"}, 421, "INVALID_HOST"),
        (INIT, {"Origin": "http://evil.example"}, 403, "INVALID_ORIGIN"),
        ({"foo": 1}, {}, 400, "INVALID_PARAMS"),
    ]
    for body, headers, status, code in cases:
        response = raw_post(mcp_live.url, body, key=key, headers=headers)
        assert response.status_code == status, response.text
        assert response.json()["error"]["data"]["code"] == code


def test_an_allowed_origin_is_served(mcp_live, requester):
    response = raw_post(mcp_live.url, INIT, key=issue_key(requester), headers={"Origin": "http://127.0.0.1:8000"})
    assert response.status_code == 200, response.text


def test_a_session_held_by_another_worker_is_served_on_its_own(mcp_live, requester):
    """Several worker processes: a follow-up whose session this process does not hold is served as a
    single request (as the key's user, no elicitation, no stream) instead of failing."""
    key = issue_key(requester)
    elsewhere = {"mcp-session-id": "0123456789abcdef0123456789abcdef", "mcp-protocol-version": "2025-11-25"}
    listed = raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, key=key, headers=elsewhere)
    assert listed.status_code == 200, listed.text
    assert "list_orders" in {tool["name"] for tool in listed.json()["result"]["tools"]}
    stream = httpx.get(mcp_live.url, headers={**elsewhere, "Authorization": f"Bearer {key}",
                                              "Accept": "text/event-stream"}, timeout=30)
    assert stream.status_code == 405 and stream.json()["error"]["data"]["code"] == "METHOD_NOT_ALLOWED"
    assert raw_post(mcp_live.url, {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}, key="0" * 64,
                    headers=elsewhere).status_code == 401


def test_the_key_never_reaches_the_logs(mcp_live, requester, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    key = issue_key(requester)
    raw_post(mcp_live.url, INIT, key=key)
    raw_post(mcp_live.url, INIT, key=key[:-2] + "zz")  # unknown
    raw_post(mcp_live.url, INIT, headers={"Authorization": f"Token {key}"})  # another scheme
    raw_post(mcp_live.url, b"{not json", key=key)
    assert caplog.records  # the server's debug logging was captured
    assert key not in caplog.text and key[:-2] not in caplog.text
