"""The OpenAPI schema, Swagger UI without a CDN, and Schemathesis against the live test server
(tests/api/test_schemathesis.py)."""
from __future__ import annotations

import io
import json
import os

import pytest
from rest_framework.throttling import SimpleRateThrottle

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
    # the approver's edit and respond, the requester's withdraw
    ("/api/v1/approvals/{request_id}/edit/", "post"), ("/api/v1/approvals/{request_id}/respond/", "post"),
    # the approver's claim
    ("/api/v1/approvals/{request_id}/claim/", "post"), ("/api/v1/approvals/{request_id}/claim/", "delete"),
    ("/api/v1/approvals/{request_id}/release/", "post"),
    ("/api/v1/my-requests/", "get"), ("/api/v1/my-requests/{request_id}/withdraw/", "post"),
    # the kill switch
    ("/api/v1/tools/{name}/stop/", "post"), ("/api/v1/tools/{name}/release/", "post"),
    ("/api/v1/kill-switches/", "get"), ("/api/v1/kill-switches/{stop_id}/release/", "post"),
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
    script = client.get("/api/docs/?script=").content.decode()  # start-up script as a file (CSP)
    assert "/api/schema/" in script and "swagger-ui-dist" in page
    assert "cdn" not in (page + script).lower() and "https://" not in page + script




# --- the schema states what the server enforces ---------------------------------------------------

def _nullable_to_types(schema):
    """An Open API 3.0 schema as plain JSON Schema (`nullable: true` -> a null type), recursively."""
    if isinstance(schema, list):
        return [_nullable_to_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _nullable_to_types(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") and "type" in schema:
        out["type"] = [schema["type"], "null"]
    return out


def _component_validator(schema: dict, name: str):
    import jsonschema

    component = _nullable_to_types(schema["components"]["schemas"][name])
    return jsonschema.Draft7Validator(component)


CHAT_BODIES = [
    {"message": "hello"},
    {"message": "  hello  "},
    {"message": ""},
    {"message": "   "},
    {"message": "\u3000\t\n"},
    {"message": "\x1c"},  # Python's whitespace, stripped by the server
    {"message": "hi\x00there"},
    {},
    {"conversation_id": None},
    {"confirmation_token": None, "message": "hello"},
    {"confirmation_token": "abc"},  # a token needs its conversation
    {"confirmation_token": "abc", "message": "hello"},
    {"confirmation_token": "", "conversation_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6"},
    {"confirmation_token": "   ", "conversation_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6"},
    {"confirmation_token": "a\x00b", "conversation_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6"},
    {"confirmation_token": "abc", "conversation_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6"},
    {"confirmation_token": "abc", "conversation_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6", "message": ""},
    {"confirmation_token": "abc", "conversation_id": None},
    {"message": "x" * 8001},
]


@pytest.mark.parametrize("body", CHAT_BODIES, ids=range(len(CHAT_BODIES)))
def test_chat_request_schema_accepts_exactly_what_the_server_accepts(client, api, requester, body):
    validator = _component_validator(openapi(client), "ChatRequestRequest")
    schema_valid = validator.is_valid(body)
    response = api(requester).post("/api/v1/chat/", body, format="json")
    # the server's verdict on the body: 400 refuses it; anything else got past validation
    # (a made-up token or conversation answers 404)
    assert (response.status_code != 400) == schema_valid, (response.status_code, response.content[:300])


@pytest.mark.parametrize("body", [{"reason": "late"}, {"reason": " "}, {"reason": "\u2003"}, {"reason": "a\x00"},
                                  {"reason": ""}, {}, {"reason": " ok "}])
def test_reject_reason_schema_accepts_exactly_what_the_server_accepts(client, api, approver1, refund_pending, body):
    validator = _component_validator(openapi(client), "RejectInputRequest")
    request_id = refund_pending.pending[0].confirmation_id
    response = api(approver1).post(f"/api/v1/approvals/{request_id}/reject/", body, format="json")
    assert (response.status_code != 400) == validator.is_valid(body), response.content[:300]


def test_every_operation_documents_every_status_the_shared_machinery_answers(client, db):
    schema = openapi(client)
    error_ref = "#/components/schemas/Error"
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            statuses = set(operation["responses"])
            assert {"401", "403", "406", "411", "413", "500", "503"} <= statuses, (method, path)
            if "requestBody" in operation:
                assert {"400", "415"} <= statuses, (method, path)
            if "{" in path:
                assert "404" in statuses, (method, path)
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"]["$ref"] == error_ref
    assert "request_id" in schema["components"]["schemas"]["Error"]["properties"]


class _Throttle(SimpleRateThrottle):
    rate = "1000/min"
    scope = "contract-test"

    def get_cache_key(self, request, view):
        return None


def test_throttled_views_document_429(db, monkeypatch):
    from drf_spectacular.generators import SchemaGenerator

    from agentplatform.api import base

    monkeypatch.setattr(base.ApiView, "throttle_classes", [_Throttle])
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert "429" in schema["paths"]["/api/v1/tools/"]["get"]["responses"]
    monkeypatch.setattr(base.ApiView, "throttle_classes", [])
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert "429" not in schema["paths"]["/api/v1/tools/"]["get"]["responses"]


def test_paginated_lists_document_and_enforce_their_parameters(client, api, requester, cancel_pending):
    schema = openapi(client)
    for path, size in (("/api/v1/conversations/", 100), ("/api/v1/approvals/", 100)):
        params = {p["name"]: p["schema"] for p in schema["paths"][path]["get"]["parameters"]}
        assert params["page"] == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
        assert params["page_size"] == {"type": "integer", "minimum": 1, "maximum": size}
    audit = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/audit-events/"]["get"]["parameters"]}
    assert audit["page_size"]["maximum"] == 500 and audit["cursor"]["type"] == "string"
    # the server holds to the same bounds
    c = api(requester)
    assert c.get("/api/v1/conversations/?page=1&page_size=100").status_code == 200
    for query in ("page=0", "page=abc", "page=last", "page_size=0", "page_size=101", "page_size=x", "page=-1",
                  "page=", "page=2147483648", "page=" + "9" * 5000, "page=١", "page_size="):
        response = c.get(f"/api/v1/conversations/?{query}")
        assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENTS", query
    assert c.get("/api/v1/conversations/?page=99").status_code == 404
    assert c.get("/api/v1/conversations/?page=2147483647").status_code == 404


@pytest.mark.parametrize("query", ["status=", "status=nope"])
def test_an_empty_or_unknown_filter_value_is_400_not_the_default(api, approver1, query):
    response = api(approver1).get(f"/api/v1/approvals/?{query}")
    assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENTS"


@pytest.mark.parametrize("query", ["tool=", "user=", "decision=", "from=", "format=", "format=xml"])
def test_an_empty_or_unknown_audit_filter_is_400(api, approver1, query):
    from django.contrib.auth.models import Permission

    approver1.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    response = api(approver1).get(f"/api/v1/audit-events/?{query}")
    assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENTS", response.content


def test_headers_and_text_rules_are_in_the_schema(client, db):
    schema = openapi(client)
    chat = schema["paths"]["/api/v1/chat/"]["post"]
    key = next(p for p in chat["parameters"] if p["name"] == "Idempotency-Key")["schema"]
    assert key == {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]*[!-~][ -~]*$"}
    events = schema["paths"]["/api/v1/runs/{run_id}/events/"]["get"]
    for parameter in events["parameters"]:
        if parameter["name"] in ("Last-Event-ID", "last_event_id"):
            assert parameter["schema"] == {"type": "integer", "minimum": 0, "maximum": 2147483647}
    components = schema["components"]["schemas"]
    assert "\\u0000" in components["ConfirmationTokenInputRequest"]["properties"]["token"]["pattern"]
    assert "\\u0000" in components["ConversationCreateRequest"]["properties"]["title"]["oneOf"][0]["pattern"]
    audit = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/audit-events/"]["get"]["parameters"]}
    assert "\\u0000" in audit["tool"]["pattern"]
    assert components["ChatRequestRequest"]["anyOf"]


def test_links_lead_from_pending_calls_to_their_decisions(client, db):
    schema = openapi(client)
    operations = {op["operationId"] for item in schema["paths"].values() for op in item.values()}

    def links(path, method, status="200"):
        found = schema["paths"][path][method]["responses"][status]["links"]
        assert {link["operationId"] for link in found.values()} <= operations
        return {name: link for name, link in found.items()}

    chat = links("/api/v1/chat/", "post")
    assert chat["ConfirmPending"]["requestBody"] == {"token": "$response.body#/pending/0/token"}
    assert chat["CancelPending"]["operationId"] == "confirmations_cancel"
    assert chat["ApprovePending"]["parameters"] == {"request_id": "$response.body#/pending/0/confirmation_id"}
    assert chat["RejectPending"]["operationId"] == "approvals_reject"
    approvals = links("/api/v1/approvals/", "get")
    assert {approvals["Approve"]["operationId"], approvals["Reject"]["operationId"]} == {
        "approvals_approve", "approvals_reject"}
    assert approvals["Approve"]["parameters"] == {"request_id": "$response.body#/results/0/id"}
    token = links("/api/v1/confirmations/{confirmation_id}/token/", "post")
    assert token["Confirm"]["requestBody"] == {"token": "$response.body#/token"}


def test_spectacular_validate_is_clean():
    from django.core.management import call_command

    out, err = io.StringIO(), io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", os.devnull, stdout=out, stderr=err)
    assert "Error" not in err.getvalue() + out.getvalue()
