"""Authentication (token for programs, session + CSRF for pages), the one error body for framework
errors, body limits, unknown routes, and the `issue_api_token` command."""
from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.utils.crypto import get_random_string
from agentplatform.api.models import ApiKey
from rest_framework.test import APIClient

from tests.api.conftest import assert_error


def test_anonymous_request_is_401_with_token_challenge(api, people):
    response = api().get("/api/v1/tools/")
    body = assert_error(response, 401, "NOT_AUTHENTICATED")
    assert response["WWW-Authenticate"] == "Token"
    assert set(body) == {"code", "message", "retryable"}


def test_wrong_token_is_401(api, people):
    client = api()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    assert_error(client.get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")


def test_inactive_user_token_stops_working(api, requester):
    client = api(requester)
    assert client.get("/api/v1/tools/").status_code == 200
    requester.is_active = False
    requester.save(update_fields=["is_active"])
    assert_error(client.get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")


def test_session_post_needs_the_csrf_token(requester):
    # given: a person signed in to the pages
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(requester)  # (django-axes needs the request a real sign-in passes; see tests/web/test_login_lockout.py)
    # then: reads work with the session alone
    assert client.get("/api/v1/tools/").status_code == 200
    # but a write without the CSRF token is refused, and with it goes through
    assert_error(client.post("/api/v1/conversations/", {"title": "x"}, format="json"), 403, "CSRF_FAILED")
    # the page holds the csrftoken cookie (set by Django's ensure_csrf_cookie) and echoes it in a header
    csrf_value = get_random_string(32)  # a CSRF secret: 32 letters and digits
    client.cookies["csrftoken"] = csrf_value
    response = client.post("/api/v1/conversations/", {"title": "x"}, format="json", HTTP_X_CSRFTOKEN=csrf_value)
    assert response.status_code == 201


def test_malformed_json_is_400_malformed_json(api, requester):
    response = api(requester).post("/api/v1/chat/", data='{"message": "hi",', content_type="application/json")
    assert_error(response, 400, "MALFORMED_JSON")


@pytest.mark.parametrize("body", [
    {"message": 42},
    {"message": ["a"]},
    {"message": "hi", "conversation_id": 7},
    {"message": "hi", "conversation_id": "not-a-uuid"},
    ["message", "hi"],
    {"message": "   "},
    {"confirmation_token": "ct_x"},
])
def test_wrong_types_are_400_invalid_arguments_with_field_errors(api, requester, body):
    response = api(requester).post("/api/v1/chat/", data=json.dumps(body), content_type="application/json")
    error = assert_error(response, 400, "INVALID_ARGUMENTS")
    assert error["errors"]


def test_not_json_is_415(api, requester):
    response = api(requester).post("/api/v1/chat/", data="message=hi", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_body_over_256_kb_is_413_with_the_error_body(api, requester):
    big = json.dumps({"message": "x" * (256 * 1024)})
    response = api(requester).post("/api/v1/chat/", data=big, content_type="application/json")
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")


def test_body_just_under_the_limit_is_parsed(api, requester):
    # 200 KB: parsed, then refused by the message length rule, not by the size limit
    body = json.dumps({"message": "x" * (200 * 1024)})
    response = api(requester).post("/api/v1/chat/", data=body, content_type="application/json")
    assert_error(response, 400, "INVALID_ARGUMENTS")


@pytest.mark.parametrize("path", [
    "/api/v1/nope/",
    "/api/v2/tools/",
    "/api/v1/tools",
    "/api/v1/runs/not-a-uuid/",
    "/api/v1/conversations/123/",
    "/api/v1/approvals/xyz/approve/",
])
def test_unknown_routes_and_non_uuid_ids_are_404_with_the_error_body(api, requester, path):
    assert_error(api(requester).get(path), 404, "NOT_FOUND")


def test_unknown_uuid_is_404(api, requester):
    assert_error(api(requester).get(f"/api/v1/runs/{uuid.uuid4()}/"), 404, "NOT_FOUND")


def test_wrong_method_is_405(api, requester):
    assert_error(api(requester).delete("/api/v1/tools/"), 405, "METHOD_NOT_ALLOWED")


def test_user_without_tenant_cannot_chat(api, people):
    from agentplatform.tenancy.models import User

    operator = User.objects.create_user(username="operator", password="x" * 12)
    assert_error(api(operator).post("/api/v1/chat/", {"message": "hi"}, format="json"), 403, "PERMISSION_DENIED")
    assert api(operator).get("/api/v1/tools/").json() == []


def test_issue_api_token_prints_a_working_token_and_rotates(api, requester):
    out = io.StringIO()
    call_command("issue_api_token", "--user", requester.username, stdout=out)
    key = out.getvalue().strip()
    assert key.startswith("ap_") and not ApiKey.objects.filter(token_key=key).exists()  # digest only
    assert ApiKey.objects.get(user=requester, name="issued by manage.py").token_key == key[:15]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/tools/").status_code == 200

    again = io.StringIO()
    call_command("issue_api_token", "--user", requester.username, stdout=again)
    assert again.getvalue().strip() != key  # a new key each time (the old one is never shown again)
    assert client.get("/api/v1/tools/").status_code == 200  # ... and the first one keeps working

    rotated = io.StringIO()
    call_command("issue_api_token", "--user", requester.username, "--rotate", stdout=rotated)
    assert rotated.getvalue().strip() != key
    assert_error(client.get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")


def test_issue_api_token_refuses_unknown_and_inactive_users(requester):
    with pytest.raises(CommandError, match="no user"):
        call_command("issue_api_token", "--user", "ghost", stdout=io.StringIO())
    requester.is_active = False
    requester.save(update_fields=["is_active"])
    with pytest.raises(CommandError, match="inactive"):
        call_command("issue_api_token", "--user", requester.username, stdout=io.StringIO())
    assert not ApiKey.objects.filter(user=requester).exists()


def test_deeply_nested_json_is_a_malformed_json_error_not_a_500(requester):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(requester)
    body = '{"message": "hi", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = client.post("/api/v1/chat/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "MALFORMED_JSON"


def test_a_chunked_body_without_length_is_refused_before_parsing(requester):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(requester)
    response = client.post("/api/v1/chat/", data='{"message": "hi"}', content_type="application/json",
                           HTTP_TRANSFER_ENCODING="chunked")
    assert response.status_code == 411
    assert response.json()["code"] == "LENGTH_REQUIRED"


def test_a_busy_database_is_a_retryable_503(requester, monkeypatch):
    from django.db import OperationalError
    from rest_framework.test import APIClient

    def locked(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr("agentplatform.api.views.chat.chat_send", locked)
    client = APIClient()
    client.force_authenticate(requester)
    response = client.post("/api/v1/chat/", data={"message": "hi"}, format="json")
    assert response.status_code == 503
    body = response.json()
    assert (body["code"], body["retryable"]) == ("DATABASE_BUSY", True)
    # never claims that nothing happened: what committed before the failure stays done
    assert "stays done" in body["message"] and "check the run" in body["message"]
