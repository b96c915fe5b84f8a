"""No secret in any span: every attribute of every span (ours and the Django and httpx2
instrumentations') is scanned for the model's API key, the caller's platform API token, the
requester's confirmation token and the unmasked card number and phone number the call carried;
the masked-content opt-in adds the masked arguments and result, never the raw ones."""
from __future__ import annotations

import contextlib
import json

import pytest
from django.db import connection

from tests.api.conftest import authorization_header
from tests.ops.tracing_support import attrs, spans  # noqa: F401 - fixture
from tests.tools.support import ORDER, model  # noqa: F401 - fixture
from rest_framework.test import APIClient

CARD = "4111 1111 1111 1111"
PHONE = "13812345678"
REASON = f"customer asked by phone {PHONE}; refund to card {CARD}"


@contextlib.contextmanager
def instrumented(provider):
    """The Django, httpx2 and psycopg instrumentations on, recording into `provider`, for the block
    (the database connection is opened again inside it, and again after it, uninstrumented)."""
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    DjangoInstrumentor().instrument(tracer_provider=provider)
    HTTPX2ClientInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False)
    connection.close()
    try:
        yield
    finally:
        PsycopgInstrumentor().uninstrument()
        HTTPX2ClientInstrumentor().uninstrument()
        DjangoInstrumentor().uninstrument()
        connection.close()


@pytest.mark.parametrize("capture", [False, True], ids=["default", "masked-content"])
def test_no_key_token_card_or_phone_in_any_attribute(transactional_db, requester, model, spans, settings, capture):
    settings.TRACING_CAPTURE_MASKED_CONTENT = capture
    model.calls(("call_cancel", "cancel_order", {"order_id": ORDER, "reason": REASON}))
    model.says("Cancelled.")
    header = authorization_header(requester)
    with instrumented(spans.provider):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        first = client.post("/api/v1/chat/", {"message": f"cancel {ORDER}"}, format="json")
        assert first.status_code == 200, first.content
        body = first.json()
        token = body["pending"][0]["token"]
        done = client.post("/api/v1/chat/", {"message": "yes", "conversation_id": body["conversation_id"],
                                             "confirmation_token": token}, format="json")
        assert done.status_code == 200, done.content

    names = {s.name for s in spans.all()}
    # the instrumentations' spans are there too: the API requests and the model calls over HTTP
    assert {"invoke_agent", "execute_tool cancel_order", "approval.decide", "approval.wait"} <= names
    assert any(s.name.startswith("POST") and attrs(s).get("http.route", "").startswith("api/v1/chat")
               for s in spans.all()), names
    # the model's HTTP requests (made in the exchange's helper thread) are children of the chat spans
    model_requests = [s for s in spans.all() if s.name == "POST" and "/chat/completions" in attrs(s).get("http.url", "")]
    chats = spans.named("chat ")
    assert len(model_requests) == len(chats) == 2
    assert all(any(spans.parent_of(r, c) for c in chats) for r in model_requests)
    if connection.vendor == "postgresql":  # psycopg's spans: statements with placeholders, no values
        statements = [s for s in spans.all() if attrs(s).get("db.system") == "postgresql"]
        assert statements and any(spans.parent_of(s, executed) for s in statements
                                  for executed in spans.named("execute_tool cancel_order"))
    secrets = (settings.LLM_API_KEY, header.split()[1], token, CARD, CARD.replace(" ", ""), PHONE)
    assert spans.secrets_in(*secrets) == []
    assert spans.secrets_in(body["run_id"])  # the scan does read every attribute
    executed = [s for s in spans.named("execute_tool cancel_order") if attrs(s)["agentplatform.decision"] == "EXECUTED"]
    assert len(executed) == 1
    if capture:
        arguments = json.loads(attrs(executed[0])["gen_ai.tool.call.arguments"])
        assert arguments["order_id"] == ORDER and "138****5678" in arguments["reason"]
        assert json.loads(attrs(executed[0])["gen_ai.tool.call.result"])["current_status"] == "CANCELLED"
    else:
        assert not [k for s in spans.all() for k in attrs(s) if k.startswith("gen_ai.tool.call.arguments")]
