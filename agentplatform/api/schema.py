"""OpenAPI pieces shared by the views: the error body as a component, the documented errors, and
`ApiAutoSchema`, which adds to every operation what the shared machinery of `ApiView` makes it
answer (so the schema states every status an endpoint can return):

- every operation: 401/403 (authentication, permissions), 406 (Accept), 411/413 (the body-size
  check runs for every method), 500 (SERVER_ERROR) and 503 (model or database busy); 429 when the
  view has throttles (read from the view, whatever throttling is installed);
- an operation that reads a JSON body: 400, 415;
- an operation with path parameters or a paginated list: 404;
- a paginated list: its `page`/`page_size` or `cursor`/`page_size` query parameters with bounds;
- OpenAPI links (LINKS) from a pending confirmation to confirm/cancel, and from an approval
  request to approve/reject, so generated clients and stateful tests follow real tokens and ids.
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_serializer
from rest_framework import serializers
from rest_framework.pagination import CursorPagination, PageNumberPagination

ERROR_MEANINGS = {
    400: ("Malformed JSON (MALFORMED_JSON), invalid arguments or text with a lone surrogate "
          "(INVALID_ARGUMENTS, with field `errors`), a cursor this server did not issue (INVALID_CURSOR), "
          "an edit that changes nothing once normalised (EDIT_UNCHANGED), or one beyond what the requester asked "
          "for (EDIT_NOT_ALLOWED, with field `errors`), a tool that does not exist here (UNKNOWN_TOOL)."),
    401: "No or invalid credentials (NOT_AUTHENTICATED, AUTHENTICATION_FAILED).",
    403: "Authenticated but not allowed (PERMISSION_DENIED, APPROVAL_FORBIDDEN, CSRF_FAILED).",
    404: ("Unknown id, an object of another tenant or user, or a page past the last one "
          "(NOT_FOUND, CONFIRMATION_INVALID)."),
    406: ("The Accept header, or a `?format=`, names no media type this endpoint renders (NOT_ACCEPTABLE, "
          "naming the formats it has)."),
    409: ("The object was already decided (ALREADY_DECIDED), an edit was based on arguments another approver "
          "changed meanwhile (ARGUMENTS_CHANGED), the run already ended (RUN_FINISHED, cancelling a run), or "
          "the request is still in flight (IN_PROGRESS), a tool already stopped (TOOL_ALREADY_STOPPED) or not "
          "stopped (TOOL_NOT_STOPPED)."),
    410: "The confirmation request expired before this decision (CONFIRMATION_EXPIRED).",
    411: "A body was sent chunked, without Content-Length (LENGTH_REQUIRED).",
    413: "The request body is larger than 256 KB (PAYLOAD_TOO_LARGE).",
    415: "The body is not application/json (UNSUPPORTED_MEDIA_TYPE).",
    422: "The Idempotency-Key was used before with another body (IDEMPOTENCY_KEY_REUSED).",
    429: "Too many requests (THROTTLED); retryable after the Retry-After header's seconds.",
    500: ("An error the server did not foresee (SERVER_ERROR), with a `request_id` under which it was logged; "
          "nothing was changed."),
    503: ("The model endpoint (MODEL_UNAVAILABLE) or the database (DATABASE_BUSY) is unavailable for now; "
          "retryable."),
}

# ECMA 262 and Python `re` read these patterns alike (a drf-spectacular RegexValidator carries
# them into the schema; Python's `$` also matches before a final newline, which [^\u0000]* would
# have consumed anyway). Whitespace is Python's (str.strip(), DRF's trim_whitespace), spelled out.
# NO_NUL_PATTERN does not match "": drf-spectacular adds `{maxLength: 0}` as a oneOf branch for a
# field that allows blank, and DRF never runs validators on a blank value.
_WHITESPACE = "".join(f"\\u{ord(ch):04x}" for ch in map(chr, range(0x10000)) if ch.isspace())
NO_NUL_PATTERN = r"^[^\u0000]+$"
NON_BLANK_PATTERN = rf"^[^\u0000]*[^\u0000{_WHITESPACE}][^\u0000]*$"


@extend_schema_serializer(component_name="Error")
class ErrorSerializer(serializers.Serializer):
    """The one error body of the API."""

    code = serializers.CharField(help_text="Stable machine-readable code, e.g. CONFIRMATION_EXPIRED.")
    message = serializers.CharField(help_text="Human-readable explanation.")
    retryable = serializers.BooleanField(help_text="True when the same request may succeed later.")
    errors = serializers.JSONField(required=False, help_text=(
        "Field errors (INVALID_ARGUMENTS and EDIT_NOT_ALLOWED only): field -> [messages]; for an approver's edit "
        "of tool arguments a list of {field, error, code}, code being the tool's stable reason (e.g. "
        "AMOUNT_TOO_PRECISE, NOT_EDITABLE, ABOVE_REQUESTED)."))
    run_id = serializers.UUIDField(required=False, help_text=(
        "The run this request worked on, when one is involved: read its real outcome there."))
    request_id = serializers.CharField(required=False, help_text=(
        "SERVER_ERROR only: the id under which the server logged what went wrong; quote it when reporting."))


def errors(*statuses: int) -> dict[tuple[int, str], OpenApiResponse]:
    """OpenAPI responses referencing the Error component (application/json, whatever else the
    endpoint renders) for each status in `statuses`."""
    return {(code, "application/json"): OpenApiResponse(ErrorSerializer, description=ERROR_MEANINGS[code])
            for code in statuses}


# Errors any authenticated JSON endpoint may answer (ApiAutoSchema adds them anyway).
COMMON = (401, 403)
BODY = (400, 413, 415)

# Links from a response of an operation (operationId) to the operations it leads to, with where the
# next request's values come from (OpenAPI 3.0 section 4.7.20). Request bodies are merged into a
# generated body by clients such as Schemathesis.
_PENDING_LINKS = {
    "ConfirmPending": {"operationId": "confirmations_confirm",
                       "requestBody": {"token": "$response.body#/pending/0/token"},
                       "description": "Confirm my own pending call with the token shown once."},
    "CancelPending": {"operationId": "confirmations_cancel",
                      "requestBody": {"token": "$response.body#/pending/0/token"},
                      "description": "Decline my own pending call with the token shown once."},
    "FreshToken": {"operationId": "confirmations_token",
                   "parameters": {"confirmation_id": "$response.body#/pending/0/confirmation_id"},
                   "description": "A fresh token for my own pending call (voids the previous one)."},
    "ApprovePending": {"operationId": "approvals_approve",
                       "parameters": {"request_id": "$response.body#/pending/0/confirmation_id"},
                       "description": "An approver approves the approver-gated call."},
    "RejectPending": {"operationId": "approvals_reject",
                      "parameters": {"request_id": "$response.body#/pending/0/confirmation_id"},
                      "description": "An approver rejects the approver-gated call."},
}
LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "chat_send": {
        **_PENDING_LINKS,
        "Run": {"operationId": "runs_retrieve", "parameters": {"run_id": "$response.body#/run_id"}},
        "RunEvents": {"operationId": "runs_events", "parameters": {"run_id": "$response.body#/run_id"}},
        "Conversation": {"operationId": "conversations_retrieve",
                         "parameters": {"conversation_id": "$response.body#/conversation_id"}},
    },
    "runs_retrieve": {
        "FreshToken": _PENDING_LINKS["FreshToken"],
        "ApprovePending": _PENDING_LINKS["ApprovePending"],
        "RejectPending": _PENDING_LINKS["RejectPending"],
        "RunEvents": {"operationId": "runs_events", "parameters": {"run_id": "$response.body#/id"}},
    },
    "confirmations_token": {
        "Confirm": {"operationId": "confirmations_confirm", "requestBody": {"token": "$response.body#/token"}},
        "Cancel": {"operationId": "confirmations_cancel", "requestBody": {"token": "$response.body#/token"}},
    },
    "confirmations_confirm": {"Run": {"operationId": "runs_retrieve", "parameters": {"run_id": "$response.body#/run_id"}}},
    "approvals_list": {
        "Approve": {"operationId": "approvals_approve", "parameters": {"request_id": "$response.body#/results/0/id"},
                    "description": "Approve the newest request listed."},
        "Reject": {"operationId": "approvals_reject", "parameters": {"request_id": "$response.body#/results/0/id"},
                   "description": "Reject the newest request listed."},
    },
    "conversations_list": {
        "Conversation": {"operationId": "conversations_retrieve",
                         "parameters": {"conversation_id": "$response.body#/results/0/id"}},
    },
    "conversations_create": {
        "Conversation": {"operationId": "conversations_retrieve", "parameters": {"conversation_id": "$response.body#/id"}},
        "Chat": {"operationId": "chat_send", "requestBody": {"conversation_id": "$response.body#/id"}},
    },
    "conversations_retrieve": {
        "LatestRun": {"operationId": "runs_retrieve", "parameters": {"run_id": "$response.body#/latest_run/id"}},
    },
}


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema plus what ApiView's shared machinery answers (module docstring)."""

    def _map_serializer(self, serializer, direction, bypass_extensions=False):
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        if direction == "request" and getattr(serializer, "refuses_unknown_fields", False):
            schema = {**schema, "additionalProperties": False}  # StrictInputSerializer: 400 for any other field
        return schema

    def _get_request_for_media_type(self, serializer, direction="request"):
        schema, required = super()._get_request_for_media_type(serializer, direction)
        return schema, required or bool(getattr(serializer, "body_required", False))

    def _reads_body(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None

    def _paginator(self):
        if self.method != "GET":
            return None
        pagination_class = getattr(self.view, "pagination_class", None)
        return pagination_class() if pagination_class else None

    def get_override_parameters(self) -> list:
        parameters = list(super().get_override_parameters())
        paginator = self._paginator()
        if isinstance(paginator, CursorPagination):
            parameters += [
                OpenApiParameter(paginator.cursor_query_param, OpenApiTypes.STR, OpenApiParameter.QUERY,
                                 description="The `next` or `previous` link's cursor; any other value is 400 "
                                             "INVALID_CURSOR."),
                OpenApiParameter(paginator.page_size_query_param, {"type": "integer", "minimum": 1,
                                                                   "maximum": paginator.max_page_size},
                                 OpenApiParameter.QUERY,
                                 description=f"Results per page (default {paginator.page_size})."),
            ]
        elif isinstance(paginator, PageNumberPagination):
            parameters += [
                OpenApiParameter(paginator.page_query_param, {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                                 OpenApiParameter.QUERY, description="Page number (from 1); past the last: 404."),
                OpenApiParameter(paginator.page_size_query_param, {"type": "integer", "minimum": 1,
                                                                   "maximum": paginator.max_page_size},
                                 OpenApiParameter.QUERY,
                                 description=f"Results per page (default {paginator.page_size})."),
            ]
        return parameters

    def _get_response_bodies(self, direction="response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        statuses = {401, 403, 406, 411, 413, 500, 503}
        if self._reads_body():
            statuses |= {400, 415}
        if self._paginator() is not None:
            statuses |= {400, 404}
        if "{" in self.path:
            statuses.add(404)
        if self.view.get_throttles():
            statuses.add(429)
        for status in sorted(statuses):
            if str(status) not in responses:
                responses[str(status)] = self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=ERROR_MEANINGS[status]), str(status),
                    ["application/json"], direction)
        links = LINKS.get(self.get_operation_id())
        if links:
            success = next(code for code in ("200", "201") if code in responses)
            responses[success]["links"] = links
        return dict(sorted(responses.items()))
