"""One error body everywhere: {"code", "message", "retryable"} (DESIGN section 7).

`exception_handler` is DRF's EXCEPTION_HANDLER; `api_not_found` answers unknown routes under
/api/ with the same body; `PayloadTooLarge` is raised for request bodies over
DATA_UPLOAD_MAX_MEMORY_SIZE (256 KB).
"""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from agentplatform.errors import DomainError
from agentplatform.llm.types import ModelUnavailable

_DRF_CODES = {
    exceptions.NotAuthenticated: "NOT_AUTHENTICATED",
    exceptions.AuthenticationFailed: "AUTHENTICATION_FAILED",
    exceptions.PermissionDenied: "PERMISSION_DENIED",
    exceptions.NotFound: "NOT_FOUND",
    exceptions.MethodNotAllowed: "METHOD_NOT_ALLOWED",
    exceptions.NotAcceptable: "NOT_ACCEPTABLE",
    exceptions.UnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
    exceptions.Throttled: "THROTTLED",
    exceptions.ParseError: "MALFORMED_JSON",
    exceptions.ValidationError: "INVALID_ARGUMENTS",
}


class PayloadTooLarge(DomainError):
    """The request body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE (HTTP 413)."""

    code = "PAYLOAD_TOO_LARGE"
    http_status = 413


def error_body(code: str, message: str, retryable: bool = False, **extra: Any) -> dict[str, Any]:
    """The error body: {"code", "message", "retryable"} plus optional details (e.g. field errors)."""
    return {"code": code, "message": message, "retryable": retryable, **extra}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler mapping domain and framework errors to the one error body.

    Returns None for anything else (DRF then re-raises it: a 500 from Django).
    """
    if isinstance(exc, DomainError):
        retry_after = getattr(exc, "retry_after", None)  # limits (429) say when to come back
        return Response(error_body(exc.code, exc.message, exc.retryable), status=exc.http_status,
                        headers={"Retry-After": str(retry_after)} if retry_after else None)
    if isinstance(exc, ModelUnavailable):
        return Response(error_body(exc.code, "the model is unavailable; try again", True), status=503)
    if isinstance(exc, OperationalError):
        # The database refused (locked SQLite file, connection lost, statement timeout). Work that
        # committed before the failure stays committed, so the body never claims nothing happened:
        # when a run is known its id is added (ApiView.finalize_response) to look the outcome up.
        return Response(error_body("DATABASE_BUSY", "the database failed during the request; what committed before "
                                   "the failure stays done: check the run (run_id, when given) before retrying",
                                   True), status=503)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body(PayloadTooLarge.code, "the request body is too large"),
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "ERROR")
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body(code, "the request is not valid", False, errors=response.data)
    else:
        detail = str(getattr(exc, "detail", ""))
        if isinstance(exc, exceptions.PermissionDenied) and detail.startswith("CSRF Failed"):
            code = "CSRF_FAILED"  # a session request without the CSRF token (DRF SessionAuthentication)
        response.data = error_body(code, detail, isinstance(exc, exceptions.Throttled))
    return response


@csrf_exempt  # nothing is changed here; the 404 must not turn into CSRF's HTML 403 page
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any unknown route under /api/ (including a non-UUID id in a path): 404 with the error body."""
    message = f"no API endpoint at {request.path[:200]}"
    if not request.path.endswith("/"):
        message += " (API paths end with a slash)"
    return JsonResponse(error_body("NOT_FOUND", message), status=404)
