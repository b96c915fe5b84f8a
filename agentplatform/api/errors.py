"""One error body everywhere: {"code", "message", "retryable"}.

`exception_handler` is DRF's EXCEPTION_HANDLER; `api_not_found` answers unknown routes under
/api/ with the same body; `PayloadTooLarge` is raised for request bodies over
DATA_UPLOAD_MAX_MEMORY_SIZE (256 KB). Anything nobody mapped becomes `server_error_response`:
500 SERVER_ERROR with a `request_id` that is logged with the traceback (never sent); the
middleware in `agentplatform.api.middleware` and `server_error` (the project's handler500) do the
same for errors outside DRF's views, so nothing under /api/ answers Django's HTML error page.
"""
from __future__ import annotations

import logging
import sys
import uuid
from types import TracebackType
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.signals import got_request_exception
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import DomainError
from agentplatform.llm.errors import ModelUnavailable

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


logger = logging.getLogger("agentplatform.api")

API_PREFIX = "/api/"
SERVER_ERROR = "SERVER_ERROR"
ExcInfo = tuple[type[BaseException], BaseException, TracebackType] | tuple[None, None, None]


class PayloadTooLarge(DomainError):
    """The request body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE (HTTP 413)."""

    code = "PAYLOAD_TOO_LARGE"
    http_status = 413


class InvalidText(DomainError):
    """A JSON string of the body holds a lone UTF-16 surrogate (`"\\ud800"` without its pair): valid
    JSON syntax, but not text that can be stored, hashed or sent on (RFC 8259 section 8.2)."""

    code = "INVALID_ARGUMENTS"  # the code main gives the same fault in a text field (core.text)
    http_status = 400


class InvalidCursor(DomainError):
    """A `cursor` query parameter that this server did not issue (undecodable or forged)."""

    code = "INVALID_CURSOR"
    http_status = 400


def error_body(code: str, message: str, retryable: bool = False, **extra: Any) -> dict[str, Any]:
    """The error body: {"code", "message", "retryable"} plus optional details (e.g. field errors)."""
    return {"code": code, "message": message, "retryable": retryable, **extra}


def is_api_request(request: HttpRequest) -> bool:
    """True for every path under /api/ (the versioned endpoints, the schema, the docs)."""
    return request.path_info.startswith(API_PREFIX)


def log_server_error(request: HttpRequest | None, exc_info: ExcInfo) -> str:
    """Log an unhandled error with its traceback under a fresh request id. Returns the id (32 hex).

    The id is what the client sees; the traceback and the exception's text stay in the log.
    """
    request_id = uuid.uuid4().hex
    path = request.path_info[:200] if request is not None else "?"
    method = request.method if request is not None else "?"
    logger.error("unhandled error in API request %s: %s %s", request_id, method, path, exc_info=exc_info)
    return request_id


def server_error_body(request_id: str) -> dict[str, Any]:
    """The body of a 500: SERVER_ERROR, not retryable (nothing says a retry would fare better), and
    the id under which the traceback was logged."""
    # Built here rather than by error_body: the last resort depends on as little as possible.
    return {"code": SERVER_ERROR, "message": f"the server failed to answer this request (request id {request_id})",
            "retryable": False, "request_id": request_id}


def server_error_response(request: HttpRequest | None, exc: BaseException | None = None) -> JsonResponse:
    """Log `exc` (default: the exception being handled) and answer 500 with the error body.

    Sends Django's `got_request_exception`, as Django does for the errors it turns into 500s
    (the test client re-raises on it; error trackers listen to it).
    """
    exc_info: ExcInfo = (type(exc), exc, exc.__traceback__) if exc is not None else sys.exc_info()
    request_id = log_server_error(request, exc_info)
    got_request_exception.send(sender=None, request=request)
    return JsonResponse(server_error_body(request_id), status=500)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler mapping domain and framework errors to the one error body; anything
    else is logged with a request id and answered 500 SERVER_ERROR (see `server_error_response`).
    """
    if isinstance(exc, DomainError):
        retry_after = getattr(exc, "retry_after", None)  # limits (429) say when to come back
        extra = {"errors": exc.errors} if getattr(exc, "errors", None) else {}  # field errors (an edit's)
        return Response(error_body(exc.code, exc.message, exc.retryable, **extra), status=exc.http_status,
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
        request = context.get("request")
        django_request = getattr(request, "_request", request)
        request_id = log_server_error(django_request, (type(exc), exc, exc.__traceback__))
        got_request_exception.send(sender=None, request=django_request)
        return Response(server_error_body(request_id), status=500)
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


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The project's handler500: the error body under /api/, Django's own page elsewhere.

    Django calls it while handling the exception (sys.exc_info() holds it) for errors that reached
    it through a middleware; Django logs those itself and sends got_request_exception, so this only
    logs under a request id.
    """
    if not is_api_request(request):
        return defaults.server_error(request, *args, **kwargs)
    request_id = log_server_error(request, sys.exc_info())
    return JsonResponse(server_error_body(request_id), status=500)


def bad_request(request: HttpRequest, exception: BaseException | None = None, *args: Any, **kwargs: Any) -> HttpResponse:
    """The project's handler400: what Django answers itself before any view runs (a Host header
    not in ALLOWED_HOSTS, another SuspiciousOperation) is the error body under /api/ (400
    BAD_REQUEST), Django's own page elsewhere."""
    if not is_api_request(request):
        return defaults.bad_request(request, exception, *args, **kwargs)
    return JsonResponse(error_body("BAD_REQUEST", "the request was refused before it reached the API "
                                   "(for example a Host header this server does not serve)"), status=400)
