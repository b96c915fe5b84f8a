"""One error body everywhere: {"code", "message", "retryable"} (DESIGN section 7)."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
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


def error_body(code: str, message: str, retryable: bool = False, **extra: Any) -> dict[str, Any]:
    """The error body: {"code", "message", "retryable"} plus optional details (e.g. field errors)."""
    return {"code": code, "message": message, "retryable": retryable, **extra}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler mapping domain and framework errors to the one error body."""
    if isinstance(exc, DomainError):
        return Response(error_body(exc.code, exc.message, exc.retryable), status=exc.http_status)
    if isinstance(exc, ModelUnavailable):
        return Response(error_body(exc.code, "the model is unavailable; try again", True), status=503)
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
        detail = getattr(exc, "detail", "")
        response.data = error_body(code, str(detail), isinstance(exc, exceptions.Throttled))
    return response
