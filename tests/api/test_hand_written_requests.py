"""Hand-written requests a client library would never send: every answer under /api/ is the JSON error body with a stable code, and the server enforces
what the schema states, no more and no less."""
from __future__ import annotations

import base64
import json

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from approvals.models import ConfirmationRequest
from tests.api.conftest import assert_error, authorization_header

pytestmark = pytest.mark.django_db


def _auditor(user):
    user.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    return user


# -- the error body, whatever answered -------------------------------------------------------------

@pytest.mark.parametrize("path", ["/api/v1/tools/", "/api/v1/chat/", "/api/schema/"])
def test_a_host_header_this_server_does_not_serve_gets_the_error_body(requester, path):
    response = Client().get(path, HTTP_HOST="evil.example", HTTP_AUTHORIZATION=authorization_header(requester))

    assert_error(response, 400, "BAD_REQUEST")


def test_pages_outside_the_api_keep_djangos_page_for_a_bad_host():
    response = Client().get("/accounts/login/", HTTP_HOST="evil.example")

    assert response.status_code == 400 and not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("post", "/api/docs/", 405, "METHOD_NOT_ALLOWED"),
    ("put", "/api/schema/", 405, "METHOD_NOT_ALLOWED"),
    ("get", "/api/schema/?format=xml", 406, "NOT_ACCEPTABLE"),
    ("get", "/api/docs/?format=json", 406, "NOT_ACCEPTABLE"),
])
def test_the_schema_and_docs_answer_errors_as_json(api, requester, method, path, status, code):
    assert_error(getattr(api(requester), method)(path), status, code)


def test_the_schema_still_answers_yaml_and_json(api, requester):
    assert api(requester).get("/api/schema/").status_code == 200
    assert "openapi" in api(requester).get("/api/schema/?format=json").json()


def test_an_unknown_format_is_406_naming_the_formats_not_a_404(api, requester):
    body = assert_error(api(requester).get("/api/v1/tools/?format=csv"), 406, "NOT_ACCEPTABLE")
    assert "json" in body["message"]
    before = requester.conversations.count() if hasattr(requester, "conversations") else None
    assert_error(api(requester).post("/api/v1/conversations/?format=xyz", {}, format="json"), 406, "NOT_ACCEPTABLE")
    if before is not None:
        assert requester.conversations.count() == before  # nothing was created


# -- what bodies may hold ---------------------------------------------------------------------------

def test_a_misspelt_field_is_refused_instead_of_starting_a_new_conversation(api, requester, cancel_pending):
    token, conversation = cancel_pending.pending[0].token, str(cancel_pending.run.conversation_id)

    body = assert_error(api(requester).post("/api/v1/chat/", {"conversationId": conversation, "confirmationToken": token,
                                                               "message": "yes, I confirm"}, format="json"),
                        400, "INVALID_ARGUMENTS")

    assert set(body["errors"]) == {"conversationId", "confirmationToken"}
    request = ConfirmationRequest.objects.get(pk=cancel_pending.pending[0].confirmation_id)
    assert request.status == ConfirmationRequest.Status.PENDING
    # and the correctly spelt request still confirms it
    ok = api(requester).post("/api/v1/chat/", {"conversation_id": conversation, "confirmation_token": token},
                             format="json")
    assert ok.status_code == 200, ok.json()


@pytest.mark.parametrize(("path", "body"), [
    ("/api/v1/conversations/", {"title": "t", "tenant_id": 2}),
    ("/api/v1/api-keys/", {"name": "k", "owner": "someone"}),
    ("/api/v1/confirmations/confirm/", {"token": "ct_x", "extra": 1}),
])
def test_every_request_body_refuses_unknown_fields(api, requester, path, body):
    answer = assert_error(api(requester).post(path, body, format="json"), 400, "INVALID_ARGUMENTS")
    assert set(answer["errors"]) & (set(body) - {"title", "name", "token"})


@pytest.mark.parametrize("days", ["5", 3.0, 30.5, True, 366, -1])
def test_expires_in_days_is_an_integer_within_its_bounds(api, acme_admin, days):
    body = assert_error(api(acme_admin).post("/api/v1/api-keys/", {"name": "k", "expires_in_days": days},
                                             format="json"), 400, "INVALID_ARGUMENTS")
    assert "expires_in_days" in body["errors"]


def test_expires_in_days_accepts_an_integer(api, acme_admin):
    assert api(acme_admin).post("/api/v1/api-keys/", {"name": "k", "expires_in_days": 30}, format="json").status_code == 201


@pytest.mark.parametrize("scope", ["TENANT", "x", ""])
def test_the_api_key_list_scope_is_an_enum(api, acme_admin, scope):
    assert_error(api(acme_admin).get(f"/api/v1/api-keys/?scope={scope}"), 400, "INVALID_ARGUMENTS")


@pytest.mark.parametrize("digest", ["nothex", "A" * 64, "0" * 63])
def test_an_arguments_hash_that_cannot_be_one_is_400_not_409(api, approver1, refund_pending, digest):
    request_id = refund_pending.pending[0].confirmation_id
    body = assert_error(api(approver1).post(f"/api/v1/approvals/{request_id}/approve/", {"arguments_hash": digest},
                                            format="json"), 400, "INVALID_ARGUMENTS")
    assert "arguments_hash" in body["errors"]


# -- paths, query strings, cursors ------------------------------------------------------------------

def test_an_upper_case_id_in_a_path_finds_the_object(api, requester, cancel_pending):
    conversation = str(cancel_pending.run.conversation_id).upper()
    run = str(cancel_pending.run.pk).upper()

    assert api(requester).get(f"/api/v1/conversations/{conversation}/").status_code == 200
    assert api(requester).get(f"/api/v1/runs/{run}/").json()["id"] == str(cancel_pending.run.pk)


@pytest.mark.parametrize("position", ["p=-1", "p=99999999999999999999999999999999", "o=5&p=1"])
def test_a_hand_made_cursor_is_refused(api, approver1, cancel_pending, position):
    cursor = base64.b64encode(position.encode()).decode()
    assert_error(api(_auditor(approver1)).get(f"/api/v1/audit-events/?cursor={cursor}"), 400, "INVALID_CURSOR")


def test_the_cursors_this_server_issues_are_followed(api, approver1, cancel_pending):
    client = api(_auditor(approver1))
    first = client.get("/api/v1/audit-events/?page_size=1").json()
    assert first["next"]
    second = client.get(first["next"])
    assert second.status_code == 200 and second.json()["results"] != first["results"]
    tampered = first["next"].replace("cursor=", "cursor=A")
    assert_error(client.get(tampered), 400, "INVALID_CURSOR")


@pytest.mark.parametrize("value", ["2026-12-01", "12/01/2026", "2026-12-01T"])
def test_from_and_to_are_date_times(api, approver1, value):
    body = assert_error(api(_auditor(approver1)).get(f"/api/v1/audit-events/?from={value}"), 400, "INVALID_ARGUMENTS")
    assert "from" in body["errors"]
    assert api(_auditor(approver1)).get("/api/v1/audit-events/?from=2026-12-01T00:00:00Z").status_code == 200


# -- replays and empty answers ----------------------------------------------------------------------

def test_a_replayed_error_carries_the_run_id_as_the_first_answer_did(api, people):
    approver = people["acme"]["approver2"]  # may not use list_orders: the run fails PERMISSION_DENIED
    client = api(approver)
    first = client.post("/api/v1/chat/", {"message": "list my orders"}, format="json", HTTP_IDEMPOTENCY_KEY="seq-1")
    again = client.post("/api/v1/chat/", {"message": "list my orders"}, format="json", HTTP_IDEMPOTENCY_KEY="seq-1")

    body = assert_error(first, 403, "PERMISSION_DENIED")
    assert "run_id" in body
    assert again["Idempotent-Replayed"] == "true"
    assert assert_error(again, 403, "PERMISSION_DENIED")["run_id"] == body["run_id"]


def test_a_finished_runs_event_stream_answers_204_without_a_media_type(api, requester):
    from agentplatform.runtime import services

    run = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?").run
    response = api(requester).get(f"/api/v1/runs/{run.pk}/events/", HTTP_LAST_EVENT_ID="99999")

    assert response.status_code == 204 and "Content-Type" not in response


def test_the_schema_states_the_new_rules():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    assert components["ChatRequestRequest"]["additionalProperties"] is False
    assert schema["paths"]["/api/v1/chat/"]["post"]["requestBody"]["required"] is True
    assert components["ApiKeyCreateRequest"]["properties"]["expires_in_days"]["maximum"] == 365
    run_id = next(p for p in schema["paths"]["/api/v1/runs/{run_id}/"]["get"]["parameters"] if p["name"] == "run_id")
    assert run_id["schema"] == {"type": "string", "format": "uuid"}
    assert "RUN_FINISHED" in json.dumps(schema["paths"]["/api/v1/runs/{run_id}/cancel/"]["post"]["responses"]["409"])


def test_a_number_too_long_to_parse_is_described_without_interpreter_settings(api, requester):
    response = api(requester).generic("POST", "/api/v1/conversations/", '{"title": ' + "9" * 5000 + "}",
                                      content_type="application/json")

    body = assert_error(response, 400, "MALFORMED_JSON")
    assert "sys." not in body["message"] and "4300 digits" in body["message"]
