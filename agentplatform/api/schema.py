"""OpenAPI pieces shared by the views: the error body as a component and the documented errors."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer
from rest_framework import serializers

ERROR_MEANINGS = {
    400: "Malformed JSON (MALFORMED_JSON) or invalid arguments (INVALID_ARGUMENTS, with field `errors`).",
    401: "No or invalid credentials (NOT_AUTHENTICATED, AUTHENTICATION_FAILED).",
    403: "Authenticated but not allowed (PERMISSION_DENIED, APPROVAL_FORBIDDEN, CSRF_FAILED).",
    404: "Unknown id, not a UUID, or an object of another tenant or user (NOT_FOUND, CONFIRMATION_INVALID).",
    409: "The object was already decided (ALREADY_DECIDED) or the request is still in flight (IN_PROGRESS).",
    410: "The confirmation request expired before this decision (CONFIRMATION_EXPIRED).",
    413: "The request body is larger than 256 KB (PAYLOAD_TOO_LARGE).",
    415: "The body is not application/json (UNSUPPORTED_MEDIA_TYPE).",
    422: "The Idempotency-Key was used before with another body (IDEMPOTENCY_KEY_REUSED).",
    503: "The model endpoint is unavailable (MODEL_UNAVAILABLE); retryable.",
}


@extend_schema_serializer(component_name="Error")
class ErrorSerializer(serializers.Serializer):
    """The one error body of the API."""

    code = serializers.CharField(help_text="Stable machine-readable code, e.g. CONFIRMATION_EXPIRED.")
    message = serializers.CharField(help_text="Human-readable explanation.")
    retryable = serializers.BooleanField(help_text="True when the same request may succeed later.")
    errors = serializers.JSONField(required=False, help_text="Field errors (INVALID_ARGUMENTS only).")


def errors(*statuses: int) -> dict[tuple[int, str], OpenApiResponse]:
    """OpenAPI responses referencing the Error component (application/json, whatever else the
    endpoint renders) for each status in `statuses`."""
    return {(code, "application/json"): OpenApiResponse(ErrorSerializer, description=ERROR_MEANINGS[code])
            for code in statuses}


# Errors any authenticated JSON endpoint may answer.
COMMON = (401, 403)
BODY = (400, 413, 415)
