"""The OpenAPI schema, Swagger UI without a CDN, and a property-based run of Schemathesis against
the schema: no request it generates (valid or not, with real and random ids) gets a 500, and
every error answer is the one error body."""
from __future__ import annotations

import json

import pytest
import schemathesis
from django.db import connection
from hypothesis import HealthCheck, Phase, given, settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from agentplatform.api.services import api_key_issue, api_token_issue
from agentplatform.wsgi import application

ENDPOINTS = {
    ("/api/v1/tools/", "get"), ("/api/v1/conversations/", "get"), ("/api/v1/conversations/", "post"),
    ("/api/v1/conversations/{conversation_id}/", "get"), ("/api/v1/chat/", "post"),
    ("/api/v1/runs/{run_id}/", "get"), ("/api/v1/runs/{run_id}/events/", "get"),
    ("/api/v1/runs/{run_id}/cancel/", "post"),
    ("/api/v1/confirmations/confirm/", "post"), ("/api/v1/confirmations/cancel/", "post"),
    ("/api/v1/confirmations/{confirmation_id}/token/", "post"), ("/api/v1/approvals/", "get"),
    ("/api/v1/approvals/{request_id}/approve/", "post"), ("/api/v1/approvals/{request_id}/reject/", "post"),
    ("/api/v1/audit-events/", "get"),
    ("/api/v1/api-keys/", "get"), ("/api/v1/api-keys/", "post"), ("/api/v1/api-keys/{key_id}/", "delete"),
}
EXAMPLES_PER_OPERATION = 12  # per generation mode and id source; keeps the whole run well under a minute


def openapi(client) -> dict:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_schema_describes_every_endpoint_and_its_errors(client, db):
    schema = openapi(client)
    assert schema["openapi"].startswith("3.")
    operations = {(path, method) for path, item in schema["paths"].items() for method in item}
    assert operations == ENDPOINTS
    error_ref = "#/components/schemas/Error"
    assert set(schema["components"]["schemas"]["Error"]["required"]) == {"code", "message", "retryable"}
    for path, method in ENDPOINTS:
        responses = schema["paths"][path][method]["responses"]
        assert responses["401"]["content"]["application/json"]["schema"]["$ref"] == error_ref, (path, method)
        for status, response in responses.items():
            if int(status) >= 400:
                assert response["content"]["application/json"]["schema"]["$ref"] == error_ref, (path, method, status)
    chat = schema["paths"]["/api/v1/chat/"]["post"]
    assert {"400", "403", "404", "409", "410", "413", "422"} <= set(chat["responses"])
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in chat["parameters"])
    approve = schema["paths"]["/api/v1/approvals/{request_id}/approve/"]["post"]["responses"]
    assert {"403", "404", "409", "410"} <= set(approve)
    events = schema["paths"]["/api/v1/runs/{run_id}/events/"]["get"]
    assert "text/event-stream" in events["responses"]["200"]["content"]
    assert {p["name"] for p in events["parameters"]} >= {"Last-Event-ID", "last_event_id"}
    audit = schema["paths"]["/api/v1/audit-events/"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "application/x-ndjson", "text/csv"} <= set(audit)
    assert {"tokenAuth", "cookieAuth"} <= set(schema["components"]["securitySchemes"])


def test_swagger_ui_is_served_by_the_project_without_a_cdn(client, db):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    script = client.get("/api/docs/?script=").content.decode()  # start-up script as a file (CSP)
    assert "/api/schema/" in script and "swagger-ui-dist" in page
    assert "cdn" not in (page + script).lower() and "https://" not in page + script


@pytest.fixture
def wsgi_like_test_client(monkeypatch):
    """Run WSGI requests inside the test's transaction, as Django's test client does: the
    request signals must not close the connection that holds it.

    Patched on the connection rather than by disconnecting `close_old_connections`: a streaming
    response left over from an earlier test, closed by the garbage collector mid-test, runs the
    test client's closing wrapper, which reconnects that receiver (a flaky "connection is closed").
    """
    monkeypatch.setattr(connection, "close_if_unusable_or_obsolete", lambda: None)
    yield


def test_no_generated_request_gets_a_server_error(people, requester, cancel_pending, refund_pending, settings,
                                                  wsgi_like_test_client):
    settings.API_SSE_MAX_SECONDS = 0.05
    settings.API_SSE_POLL_SECONDS = 0.05
    token = api_token_issue(user=requester)
    known_ids = {
        "conversation_id": str(cancel_pending.run.conversation_id),
        "run_id": str(cancel_pending.run.pk),
        "confirmation_id": cancel_pending.pending[0].confirmation_id,
        "request_id": refund_pending.pending[0].confirmation_id,
        "key_id": str(api_key_issue(user=requester, name="another key")[0].public_id),  # not the one in use
    }
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    failures: list[str] = []
    tried = 0

    for result in schema.get_all_operations():
        operation = result.ok()
        path_names = {p.name for p in operation.path_parameters}
        variants = [None] + ([{n: known_ids[n] for n in path_names}] if path_names else [])
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            # real ids with valid data reach the services; invalid data is tried with generated ids
            if mode is GenerationMode.NEGATIVE and not (len(operation.query) or len(operation.body) or path_names):
                continue  # nothing to make invalid but headers: hypothesis would only search in vain
            for path_parameters in (variants if mode is GenerationMode.POSITIVE else [None]):
                strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters,
                                                 headers={"Authorization": f"Token {token}"})

                @hypothesis_settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                                     derandomize=True, phases=[Phase.explicit, Phase.generate],
                                     suppress_health_check=list(HealthCheck))
                @given(case=strategy)
                def check(case) -> None:
                    nonlocal tried
                    tried += 1
                    response = case.call()
                    where = f"{case.method} {case.formatted_path} ({mode.value}) -> {response.status_code}"
                    if response.status_code >= 500:
                        failures.append(f"{where}: {response.text[:300]}")
                    elif response.status_code >= 400:
                        try:
                            body = response.json()
                        except ValueError:
                            body = None
                        if not (isinstance(body, dict) and {"code", "message", "retryable"} <= set(body)):
                            failures.append(f"{where}: not the error body: {response.text[:200]}")

                try:
                    check()
                except Unsatisfiable:
                    pass  # nothing can be made invalid here (e.g. a fixed id and no body)

    assert tried > 200
    assert failures == [], "\n".join(failures[:20])
