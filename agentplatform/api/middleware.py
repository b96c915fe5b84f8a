"""Nothing under /api/ answers an HTML error page (a program reads JSON): an exception a view let through
becomes the 500 error body with a logged request id.

Install first in MIDDLEWARE (outermost). DRF views already answer through the API's exception
handler; this catches what other views under /api/ raise (`process_exception`), and, as a
backstop, rewrites a non-JSON 5xx page under /api/ that some inner layer produced (with DEBUG on,
Django's technical page for an error raised in a middleware).
"""
from __future__ import annotations

import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.api.errors import is_api_request, logger, server_error_body, server_error_response


class ApiErrorMiddleware:
    """Turns unhandled errors under /api/ into the error body (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (is_api_request(request) and response.status_code >= 500 and not response.streaming
                and not response.get("Content-Type", "").startswith("application/json")):
            # Django rendered its own page for an error it logged itself ("Internal Server Error").
            request_id = uuid.uuid4().hex
            logger.error("API request %s: %s %s answered %s by a non-JSON page (traceback logged by django.request)",
                         request_id, request.method, request.path_info[:200], response.status_code)
            return JsonResponse(server_error_body(request_id), status=response.status_code)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_api_request(request):
            return None  # pages keep Django's handling (handler500 / the debug page)
        return server_error_response(request, exception)

