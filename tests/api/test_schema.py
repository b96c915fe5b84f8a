"""The OpenAPI schema, Swagger UI without a CDN, and Schemathesis against the live test server
(tests/api/test_schemathesis.py)."""
from __future__ import annotations

import json

ENDPOINTS = {
    ("/api/v1/tools/", "get"), ("/api/v1/conversations/", "get"), ("/api/v1/conversations/", "post"),
    ("/api/v1/conversations/{conversation_id}/", "get"), ("/api/v1/chat/", "post"),
    ("/api/v1/runs/{run_id}/", "get"), ("/api/v1/runs/{run_id}/events/", "get"),
    ("/api/v1/runs/{run_id}/cancel/", "post"),
    ("/api/v1/confirmations/confirm/", "post"), ("/api/v1/confirmations/cancel/", "post"),
    ("/api/v1/confirmations/{confirmation_id}/token/", "post"), ("/api/v1/approvals/", "get"),
    ("/api/v1/approvals/{request_id}/approve/", "post"), ("/api/v1/approvals/{request_id}/reject/", "post"),
    ("/api/v1/audit-events/", "get"),
}


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
    assert "/api/schema/" in page and "swagger-ui-dist" in page
    assert "cdn" not in page.lower() and "https://" not in page


