"""What every API view shares: authentication (token for programs, session + CSRF for the pages),
JSON in and out, the 256 KB body limit, the error body for every error whatever was negotiated,
strict serializer fields and pagination."""
from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from agentplatform.api.auth import ApiKeyAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform import correlation
from agentplatform.api.errors import PayloadTooLarge
from agentplatform.runtime.settle import settle_for
from agentplatform.errors import DomainError
from agentplatform.text import unstorable_reason


class LengthRequired(DomainError):
    """A body sent without Content-Length (chunked): its size cannot be bounded up front (HTTP 411)."""

    code = "LENGTH_REQUIRED"
    http_status = 411


class BoundedJSONParser(JSONParser):
    """DRF's JSONParser, plus: JSON nested deeply enough to exhaust the recursion limit is a 400
    MALFORMED_JSON, not a 500 (json.loads raises RecursionError, which DRF does not catch)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply") from None


class ApiView(APIView):
    """Base of every /api/v1/ view (HackSoft style: one thin view per resource or action).

    Token authentication comes first so an anonymous request answers 401 with
    `WWW-Authenticate: Token`; the session (with CSRF, enforced by DRF) serves the pages.
    """

    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [BoundedJSONParser]
    renderer_classes = [JSONRenderer]

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
        if request.user.is_authenticated:  # DRF authenticated it: log lines name the user (issue 12)
            correlation.bind(user_id=request.user.pk, tenant=getattr(request.user, "tenant_id", None))
        # Settle-on-read once the user is known (docs/decisions.md, item 9): nothing this request
        # reads still shows a request past its deadline as waiting.
        settle_for(request.user)

    def finalize_response(self, request: Request, response, *args: Any, **kwargs: Any):
        # Errors are always the JSON error body, even when the client negotiated CSV or SSE.
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
            run_id = correlation.current_run_id()
            if run_id is not None and isinstance(response.data, dict) and "code" in response.data:
                # The run this request worked on: the client can read its real outcome from it.
                response.data.setdefault("run_id", str(run_id))
        return super().finalize_response(request, response, *args, **kwargs)


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text, and text
    PostgreSQL cannot store (DRF refuses NUL already; a JSON body can also escape a lone surrogate:
    agentplatform.text)."""

    default_error_messages = {"unstorable": "This text {reason}."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        reason = unstorable_reason(data)
        if reason:
            self.fail("unstorable", reason=reason)
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUIDField that accepts only a UUID string (DRF also accepts integers)."""

    def to_internal_value(self, data: Any) -> uuid.UUID:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class PagePagination(PageNumberPagination):
    """`?page=N&page_size=M` (default 20, at most 100) -> {count, next, previous, results}."""

    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100


def paginated_response(view: APIView, queryset: QuerySet, serializer_class: type[serializers.Serializer],
                       **context: Any) -> Response:
    """Paginate `queryset` with `view.pagination_class` and serialize the page."""
    paginator = view.pagination_class()
    page = paginator.paginate_queryset(queryset, view.request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True, context=context).data)
