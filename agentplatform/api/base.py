"""What every API view shares: authentication (token for programs, session + CSRF for the pages),
JSON in and out, the 256 KB body limit, and the error body for every error whatever was negotiated.

Strict input serializers and fields are in `agentplatform.api.serializers`, pagination in
`agentplatform.api.pagination`."""
from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import correlation
from agentplatform.api.auth import ApiKeyAuthentication
from agentplatform.api.errors import InvalidText, PayloadTooLarge
from agentplatform.api.schema import ApiAutoSchema
from core.errors import DomainError
from agentplatform.runtime.settle import settle_for


class LengthRequired(DomainError):
    """A body sent without Content-Length (chunked): its size cannot be bounded up front (HTTP 411)."""

    code = "LENGTH_REQUIRED"
    http_status = 411


_SURROGATE = re.compile("[\ud800-\udfff]")


def first_lone_surrogate(data: Any) -> str | None:
    """The first string (key or value) in parsed JSON `data` holding a lone surrogate, else None.

    json.loads joins an escaped pair (`\\ud83d\\ude00`) into one character, so any surrogate left
    in a str is unpaired. Iterative: the document may be as deep as the parser allowed.
    """
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


class BoundedJSONParser(JSONParser):
    """DRF's JSONParser, plus: JSON nested deeply enough to exhaust the recursion limit is a 400
    MALFORMED_JSON, not a 500 (json.loads raises RecursionError, which DRF does not catch); a
    string with a lone surrogate escape is a 400 INVALID_ARGUMENTS (it cannot be encoded as UTF-8, so
    hashing, storing or forwarding it would fail later)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply") from None
        except ParseError as error:
            if "int_max_str_digits" in str(error.detail) or "integer string conversion" in str(error.detail):
                # Python's own wording names an interpreter setting: say what is wrong instead.
                raise ParseError("JSON parse error - a number has more than 4300 digits") from None
            raise
        if first_lone_surrogate(data) is not None:
            raise InvalidText("the JSON body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without "
                              "its pair); send text as valid Unicode")
        return data


class JsonErrors:
    """A DRF view mixin: every error answers the JSON error body (agentplatform.api.errors),
    whatever renderer the view negotiated (CSV, SSE, the schema's YAML, Swagger UI's HTML), with the
    run this request worked on when one is known."""

    def finalize_response(self, request: Request, response, *args: Any, **kwargs: Any):
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
            run_id = correlation.current_run_id()
            if run_id is not None and isinstance(response.data, dict) and "code" in response.data:
                # The run this request worked on: the client can read its real outcome from it.
                response.data.setdefault("run_id", str(run_id))
        return super().finalize_response(request, response, *args, **kwargs)


class ApiView(JsonErrors, APIView):
    """Base of every /api/v1/ view (HackSoft style: one thin view per resource or action).

    Token authentication comes first so an anonymous request answers 401 with
    `WWW-Authenticate: Token`; the session (with CSRF, enforced by DRF) serves the pages.
    """

    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [BoundedJSONParser]
    renderer_classes = [JSONRenderer]
    schema = ApiAutoSchema()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        correlation.set_run_id(None)
        # DRF's JSON parser reads the stream directly, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE
        # (which guards request.body) never applies: refuse an oversized body before parsing.
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            # Without a length the size limit cannot be checked before the parser reads the stream.
            raise LengthRequired("send the body with a Content-Length header, not chunked")
        if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise PayloadTooLarge(f"the request body exceeds {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
        super().initial(request, *args, **kwargs)
        if request.user.is_authenticated:  # DRF authenticated it: log lines name the user
            correlation.bind(user_id=request.user.pk, tenant=getattr(request.user, "tenant_id", None))
        # Settle-on-read once the user is known (docs/decisions.md): nothing this request
        # reads still shows a request past its deadline as waiting.
        settle_for(request.user)


