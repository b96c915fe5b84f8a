"""JSON log lines with the request id and the correlation fields; the request id
echoed and recorded on runs and audit rows; no token or secret in any log line."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import re

import pytest

from core import correlation
from agentplatform.ops.logs import CorrelationFilter, JsonFormatter, RedactingFilter, redact
from agentplatform.runtime.models import Run
from audit.models import AuditEvent
from tests.api.conftest import CANCEL_ORDER, REFUND_ORDER


@contextlib.contextmanager
def _captured(*filters: logging.Filter):
    """Everything logged (DEBUG and up) meanwhile, through `filters` and the JSON formatter: yields
    a function returning the text so far."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    for each in filters:
        handler.addFilter(each)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream.getvalue
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture
def log_lines():
    """Everything logged (DEBUG and up) during the test, through the production filters and formatter."""
    with _captured(CorrelationFilter(), RedactingFilter()) as text:
        yield lambda: [json.loads(line) for line in text().splitlines() if line.strip()]


def test_the_request_id_is_echoed_recorded_and_logged(api, requester, log_lines):
    response = api(requester).post("/api/v1/chat/", {"message": "How many SKU-10001 are in stock in WH-HZ-01?"},
                                   format="json", HTTP_X_REQUEST_ID="client-rid-42")
    assert response.status_code == 200
    assert response["X-Request-ID"] == "client-rid-42"
    run = Run.objects.get(pk=response.json()["run_id"])
    assert run.request_id == "client-rid-42"
    rows = AuditEvent.objects.filter(run_id=run.pk)
    assert rows.exists() and set(rows.values_list("request_id", flat=True)) == {"client-rid-42"}
    access = [line for line in log_lines() if line["logger"] == "agentplatform.access"]
    assert len(access) == 1
    line = access[0]
    assert line["request_id"] == "client-rid-42" and line["status"] == 200 and line["path"] == "/api/v1/chat/"
    assert line["user_id"] == str(requester.pk) and line["tenant"] == str(requester.tenant_id)
    assert line["run_id"] == str(run.pk) and line["conversation_id"] == str(run.conversation_id)
    assert {"time", "level", "message", "duration_ms"} <= set(line)


@pytest.mark.parametrize("sent", [None, "", "has spaces", "x" * 65, "<script>"])
def test_a_missing_or_unsafe_request_id_is_replaced(client, db, sent):
    extra = {"HTTP_X_REQUEST_ID": sent} if sent is not None else {}
    response = client.get("/healthz", **extra)
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])


def test_a_generated_request_id_reaches_the_run_and_an_approval_audit_row(api, requester, approver1):
    # given: a refund waiting for approvers, started without X-Request-ID
    response = api(requester).post("/api/v1/chat/", {"message": f"Refund order {REFUND_ORDER} because it broke"},
                                   format="json")
    generated = response["X-Request-ID"]
    assert Run.objects.get(pk=response.json()["run_id"]).request_id == generated
    request_id = response.json()["pending"][0]["confirmation_id"]
    # when: an approver approves with their own request id
    approved = api(approver1).post(f"/api/v1/approvals/{request_id}/approve/", {"comment": "ok"}, format="json",
                                   HTTP_X_REQUEST_ID="approver-rid-7")
    assert approved.status_code == 200, approved.content
    # then: the approval's audit row carries the approver's request id
    assert AuditEvent.objects.get(confirmation_id=request_id, decision="APPROVED").request_id == "approver-rid-7"


def test_no_token_or_secret_in_any_log_line(api, requester, settings, log_lines):
    client = api(requester)
    api_token = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    # a confirmation token is issued, logged carelessly, sent back, and replayed (refused)
    first = client.post("/api/v1/chat/", {"message": f"Please cancel order {CANCEL_ORDER} because it is late"},
                        format="json")
    token = first.json()["pending"][0]["token"]
    body = {"conversation_id": first.json()["conversation_id"], "confirmation_token": token}
    assert client.post("/api/v1/chat/", body, format="json").status_code == 200
    assert client.post("/api/v1/chat/", body, format="json").status_code >= 400
    settings.LLM_API_KEY = "sk-live-abcdefghijklmnop0123"  # after the chats: the model stays offline
    log = logging.getLogger("tests.careless")
    log.warning("got token %s with header Authorization: Token %s", token, api_token)
    log.error("config %s", {"api_key": settings.LLM_API_KEY, "password": "hunter2-hunter2"})
    try:
        raise ValueError(f"boom with {token}")
    except ValueError:
        log.exception("failed")
    lines = log_lines()
    text = json.dumps(lines)
    assert len(lines) >= 5
    for secret in (token, api_token, settings.LLM_API_KEY, settings.SECRET_KEY, "hunter2-hunter2"):
        assert secret not in text
    assert "[redacted]" in text


def test_redact_keeps_ordinary_words():
    assert redact("the confirmation token expired") == "the confirmation token expired"
    assert redact("Authorization: Token 0123456789abcdef0123456789abcdef01234567") == \
        "Authorization: Token [redacted]"


def test_tool_and_tool_call_id_are_bound_while_a_call_runs(monkeypatch):
    from tools import calls, manager

    seen = {}
    monkeypatch.setattr(manager.ToolCallingManager, "_execute_call",
                        lambda self, ctx, call, offered, turn: seen.update(correlation.log_fields()))
    call = calls.ToolCall(id="call_1", name="query_inventory", arguments="{}")
    manager.ToolCallingManager().execute_call(None, call, {})
    assert seen["tool"] == "query_inventory" and seen["tool_call_id"] == "call_1"
    assert "tool" not in correlation.log_fields()  # unbound afterwards


@pytest.fixture
def masked_log_lines():
    """As log_lines, with the masking filter of settings.LOGGING too."""
    from core.redaction.text import MaskingFilter

    with _captured(CorrelationFilter(), RedactingFilter(), MaskingFilter()) as text:
        yield text


def test_a_password_reset_links_token_never_reaches_the_logs(client, db, masked_log_lines):
    # the access line used to record the link's token
    client.get("/accounts/reset/NA/dix185-3c8049ef09a95ef19c02e0199a7cf500/")

    text = masked_log_lines()
    assert "/accounts/reset/NA/" in text  # the access line is there
    assert "3c8049ef09a95ef19c02e0199a7cf500" not in text and "dix185-" not in text


def test_query_strings_never_reach_the_logs_through_djangos_request_logger(client, db, masked_log_lines):
    # an anonymous API call: django.request logs "Unauthorized" with the request object as `extra`
    response = client.get("/api/v1/tools/?confirmation_token=ct_Ui99s7a_j4ufelGBPgnHgk9AG25OP5p95naKhvKBR2o"
                          "&phone=13812345678&api_key=ap_0123456789abcdef&password=hunter2hunter2")

    assert response.status_code in (401, 403)
    text = masked_log_lines()
    assert "/api/v1/tools/" in text
    for secret in ("ct_Ui99s7a", "13812345678", "ap_0123456789abcdef", "hunter2hunter2"):
        assert secret not in text, secret


def test_extra_fields_are_redacted_and_masked_like_the_message(masked_log_lines):
    logging.getLogger("agentplatform.test").warning("something", extra={
        "detail": "Bearer abcdefghijklmnopqrstuvwxyz0123456789 for 13812345678", "request_id": "12345678901234567890"})

    line = json.loads(masked_log_lines().splitlines()[-1])
    assert "abcdefghijklmnopqrstuvwxyz0123456789" not in line["detail"] and "13812345678" not in line["detail"]
    assert line["request_id"] == "12345678901234567890"  # correlation ids are never masked
