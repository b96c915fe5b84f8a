"""Every failure under /api/ answers the error body. Inputs that used to reach
Django's HTML "Server Error (500)" page get a 400 with a stable code, and whatever still escapes
becomes a 500 error body with a request id that is logged with its traceback, never shown."""
from __future__ import annotations

import base64
import logging
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from tests.api.conftest import assert_error


def auditor(user):
    user.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    return user


# --- 1. lone surrogates ---------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    '{"message": "hello", "x": "\\ud800"}',  # in a field the serializer ignores
    '{"message": "hello \\udfff"}',  # in the message itself
    '{"message": "hello", "\\ud83d": 1}',  # in a key
    '{"message": "hello", "x": ["\\ud800\\ud800"]}',  # nested, two high halves
])
@pytest.mark.parametrize("with_key", [True, False])
def test_lone_surrogate_in_body_is_400_invalid_text(api, requester, body, with_key):
    headers = {"HTTP_IDEMPOTENCY_KEY": "k-1"} if with_key else {}
    response = api(requester).post("/api/v1/chat/", data=body, content_type="application/json", **headers)
    assert_error(response, 400, "INVALID_ARGUMENTS")


def test_surrogate_pair_is_ordinary_text(api, requester):
    # an escaped pair is one valid character (U+1F600), not a lone surrogate
    response = api(requester).post("/api/v1/chat/", data='{"message": "hello \\ud83d\\ude00"}',
                                   content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("path", ["/api/v1/conversations/", "/api/v1/confirmations/confirm/"])
def test_lone_surrogate_is_refused_by_every_json_endpoint(api, requester, path):
    response = api(requester).post(path, data='{"title": "\\ud800", "token": "\\ud800"}',
                                   content_type="application/json")
    assert_error(response, 400, "INVALID_ARGUMENTS")


@pytest.mark.parametrize("key", ["\ud800", "abc\udfff", "ключ", "a\x00b", "tab\there", "x" * 256, "", "   "])
def test_idempotency_key_outside_printable_ascii_is_400(api, requester, key):
    response = api(requester).post("/api/v1/chat/", {"message": "hello"}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert_error(response, 400, "INVALID_ARGUMENTS")


# --- 2. event ids --------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["²", "١٢", "１２", "1" * 11, "9" * 4000, "-1", "+1", "1.0", "0x10", "2147483648",
                                   "", " ", "1 2"])
@pytest.mark.parametrize("where", ["header", "query"])
def test_last_event_id_must_be_ascii_digits_of_bounded_length(api, requester, cancel_pending, value, where):
    client = api(requester)
    url = f"/api/v1/runs/{cancel_pending.run.pk}/events/"
    if where == "header":
        response = client.get(url, HTTP_LAST_EVENT_ID=value)
    else:
        response = client.get(f"{url}?last_event_id={quote(value)}")
    assert_error(response, 400, "INVALID_ARGUMENTS")


@pytest.mark.parametrize("value", ["0", "1", "0001", "2147483647"])
def test_last_event_id_ascii_digits_are_accepted(api, requester, cancel_pending, value, settings):
    settings.API_SSE_MAX_SECONDS = 0
    response = api(requester).get(f"/api/v1/runs/{cancel_pending.run.pk}/events/", HTTP_LAST_EVENT_ID=value)
    assert response.status_code in (200, 204)


# --- 3. cursors ----------------------------------------------------------------------------------

def _cursor(query: str) -> str:
    return quote(base64.b64encode(query.encode()).decode())


@pytest.mark.parametrize("cursor", [
    _cursor("p=notadate"),
    _cursor("p=2026-13-45T99:00:00"),
    _cursor("p=0001-01-01T00:00:00+05:00"),  # overflows when converted to UTC
    _cursor("p=\x00"),
    _cursor("p=9999-12-31T23:00:00-05:00"),
    _cursor("o=-1"),
    _cursor("o=abc"),
    "not-base64!!",
    quote(base64.b64encode(b"\xff\xfe").decode()),
])
def test_forged_or_undecodable_cursor_is_400(api, approver1, cancel_pending, cursor):
    response = api(auditor(approver1)).get(f"/api/v1/audit-events/?cursor={cursor}")
    assert_error(response, 400, "INVALID_CURSOR")


def test_real_cursor_still_pages(api, approver1, cancel_pending, refund_pending):
    client = api(auditor(approver1))
    first = client.get("/api/v1/audit-events/?page_size=1").json()
    assert first["next"]
    second = client.get(first["next"])
    assert second.status_code == 200
    assert second.json()["results"][0]["id"] != first["results"][0]["id"]


# --- any other error -----------------------------------------------------------------------------

def test_unhandled_error_in_a_view_is_the_500_error_body_with_a_logged_request_id(
        requester, monkeypatch, caplog):
    # given: a view whose service fails in a way nobody foresaw
    from agentplatform.api.views import tools as tools_view

    def explode(**kwargs):
        raise ZeroDivisionError("secret internals 42")

    monkeypatch.setattr(tools_view, "offered_tools", explode)
    client = Client(raise_request_exception=False)
    client.force_login(requester)
    # when
    with caplog.at_level(logging.ERROR, logger="agentplatform.api"):
        response = client.get("/api/v1/tools/")
    # then: the error body, no internals, and an id that finds the traceback in the log
    body = assert_error(response, 500, "SERVER_ERROR", retryable=False)
    assert "secret internals" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    request_id = body["request_id"]
    assert len(request_id) == 32
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and logged[0].exc_info and logged[0].exc_info[0] is ZeroDivisionError


def test_unhandled_error_outside_drf_under_api_is_the_error_body(requester, monkeypatch, caplog):
    # the schema view is DRF too; the catch-all 404 view is plain Django: break it
    from agentplatform.api import errors as api_errors

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(api_errors, "error_body", broken)
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.ERROR, logger="agentplatform.api"):
        response = client.get("/api/nowhere/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == "SERVER_ERROR" and body["retryable"] is False and body["request_id"]
    assert any(body["request_id"] in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("debug", [False, True])  # handler500; with DEBUG, the middleware's backstop
def test_unhandled_error_in_a_middleware_under_api_is_the_error_body(requester, settings, caplog, debug):
    settings.DEBUG = debug
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.api.test_contract_errors.BrokenMiddleware"]
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.ERROR, logger="agentplatform.api"):
        response = client.get("/api/v1/tools/")
    assert response.status_code == 500
    assert response.json()["code"] == "SERVER_ERROR"
    assert "a middleware broke" not in response.content.decode()
    assert any(response.json()["request_id"] in r.getMessage() for r in caplog.records)
    # pages keep Django's own 500 page
    page = client.get("/chat/")
    assert page.status_code == 500 and not page["Content-Type"].startswith("application/json")


class BrokenMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        raise RuntimeError("a middleware broke")


def test_unhandled_error_under_chat_with_idempotency_key_releases_the_key(api, requester, monkeypatch):
    from agentplatform.api.views import chat as chat_view

    calls = []

    def explode(**kwargs):
        calls.append(kwargs)
        raise ZeroDivisionError("nope")

    monkeypatch.setattr(chat_view, "chat_send", explode)
    client = api(requester)
    client.raise_request_exception = False
    for _ in range(2):  # the failed attempt left no claim: the retry runs again
        response = client.post("/api/v1/chat/", {"message": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k-500")
        assert_error(response, 500, "SERVER_ERROR")
    assert len(calls) == 2
