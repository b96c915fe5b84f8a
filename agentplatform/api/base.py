"""What every API view shares: authentication (token for programs, session + CSRF for the pages),
JSON in and out, the 256 KB body limit, the error body for every error whatever was negotiated,
strict serializer fields and pagination."""
from __future__ import annotations

import binascii
import datetime
import re
import uuid
from base64 import b64decode, b64encode
from urllib.parse import parse_qs, urlencode
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.pagination import Cursor, CursorPagination, PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from agentplatform.api.auth import ApiKeyAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform import correlation
from agentplatform.api.errors import InvalidCursor, InvalidText, PayloadTooLarge
from agentplatform.api.schema import NO_NUL_PATTERN, NON_BLANK_PATTERN, ApiAutoSchema
from agentplatform.errors import DomainError, InvalidInput
from agentplatform.runtime.settle import settle_for
from agentplatform.text import unstorable_reason


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


class StrictInputSerializer(serializers.Serializer):
    """A request body serializer that refuses fields it does not define (400 INVALID_ARGUMENTS naming
    them) instead of ignoring them: a misspelt `conversationId` or `confirmationToken` must not
    silently start a new conversation. The schema says so (`additionalProperties: false`).

    body_required: the schema marks the request body required even when no single field is (a
    rule across fields, as chat's); with a required field drf-spectacular does so itself."""

    refuses_unknown_fields = True  # read by ApiAutoSchema (agentplatform.api.schema)
    body_required = False

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(str(key)[:100] for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError({key: ["unknown field; this body takes only: "
                                                         + ", ".join(sorted(self.fields))] for key in unknown[:20]})
        return super().to_internal_value(data)


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
        if request.user.is_authenticated:  # DRF authenticated it: log lines name the user (issue 12)
            correlation.bind(user_id=request.user.pk, tenant=getattr(request.user, "tenant_id", None))
        # Settle-on-read once the user is known (docs/decisions.md, item 9): nothing this request
        # reads still shows a request past its deadline as waiting.
        settle_for(request.user)


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text, and text
    PostgreSQL cannot store (DRF refuses NUL already; a JSON body can also escape a lone surrogate:
    agentplatform.text), with its text rule as a validator drf-spectacular writes into the schema as
    `pattern`: no NUL, and, unless `allow_blank`, not only whitespace (DRF trims)."""

    default_error_messages = {"unstorable": "This text {reason}."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        pattern = NO_NUL_PATTERN if self.allow_blank or not self.trim_whitespace else NON_BLANK_PATTERN
        message = "must not contain NUL" if pattern is NO_NUL_PATTERN else "must not be blank or contain NUL"
        self.validators.append(RegexValidator(pattern, message=message))

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        reason = unstorable_reason(data)
        if reason:
            self.fail("unstorable", reason=reason)
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that accepts only a JSON integer: DRF also turns "5", 3.0 and 3e1 into 5, 3
    and 30, and `true` into 1, where the schema says `type: integer`."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictDateTimeField(serializers.DateTimeField):
    """A DateTimeField that takes only an ISO 8601 date-time, as the schema states (`format:
    date-time`): a bare date such as 2026-12-01 is refused, not read as its midnight."""

    _HAS_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")

    def to_internal_value(self, value: Any):
        if not isinstance(value, str) or not self._HAS_TIME.match(value):
            self.fail("invalid", format="an ISO 8601 date-time such as 2026-12-01T08:00:00Z")
        return super().to_internal_value(value)


class StrictUUIDField(serializers.UUIDField):
    """A UUIDField that accepts only a UUID string (DRF also accepts integers)."""

    def to_internal_value(self, data: Any) -> uuid.UUID:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


def query_values(request) -> dict[str, str]:
    """The query parameters as a plain dict (the last value of a repeated one), for a filter serializer.

    Not the QueryDict itself: DRF reads an empty value of an optional field in form-like input as
    "absent", while the schema states, and the server then enforces, that a parameter that is sent
    has a valid value (`?status=` is 400, not the default).
    """
    return request.query_params.dict()


def strict_page_size(request, *, name: str, default: int, maximum: int) -> int:
    """`?<name>=` as the schema states it: absent -> `default`; else an integer 1..`maximum`.

    Raises InvalidInput (400 INVALID_ARGUMENTS) otherwise; DRF would silently use the default or
    the maximum instead.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not PAGE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= maximum:
        raise InvalidInput(f"{name} must be an integer from 1 to {maximum}")
    return int(raw)


PAGE_NUMBER = re.compile(r"[0-9]{1,10}")  # ASCII digits; int() alone also reads "١٢"
MAX_PAGE = 2**31 - 1


class PagePagination(PageNumberPagination):
    """`?page=N&page_size=M` (default 20, at most 100) -> {count, next, previous, results}.

    As the schema states: `page` an integer 1..2**31-1 (past the last page: 404), `page_size` 1..100;
    anything else is 400 INVALID_ARGUMENTS.
    """

    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100
    last_page_strings = ()

    def get_page_size(self, request) -> int:
        return strict_page_size(request, name=self.page_size_query_param, default=self.page_size,
                                maximum=self.max_page_size)

    def paginate_queryset(self, queryset, request, view=None):
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and (not PAGE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= MAX_PAGE):
            raise InvalidInput(f"{self.page_query_param} must be an integer from 1 to {MAX_PAGE}")
        return super().paginate_queryset(queryset, request, view)


def paginated_response(view: APIView, queryset: QuerySet, serializer_class: type[serializers.Serializer],
                       **context: Any) -> Response:
    """Paginate `queryset` with `view.pagination_class` and serialize the page."""
    paginator = view.pagination_class()
    page = paginator.paginate_queryset(queryset, view.request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True, context=context).data)


class StrictCursorPagination(CursorPagination):
    """DRF's CursorPagination, refusing with 400 INVALID_CURSOR every cursor it did not issue.

    DRF answers an undecodable cursor with 404 and hands a decodable one's position (`p=`) to the
    database as it is: `p=notadate` on a datetime ordering was a 500 (issue 15). Here the position
    must convert to the first ordering field's type (datetimes to an aware UTC datetime, within
    range), and the cursor carries it in the form this class issues.
    """

    invalid_cursor_message = "the cursor is not one this server issued; start again without it"

    def get_page_size(self, request) -> int:
        return strict_page_size(request, name=self.page_size_query_param, default=self.page_size,
                                maximum=self.max_page_size)

    def paginate_queryset(self, queryset, request, view=None):
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    # Cursors are signed (Django's signing, SECRET_KEY, a salt of their own): a cursor this server
    # did not issue, such as a hand-made `p=-1`, is refused instead of read as a position.
    _signer = signing.Signer(salt="agentplatform.api.cursor")

    def encode_cursor(self, cursor: Cursor) -> str:
        tokens = {}
        if cursor.offset != 0:
            tokens["o"] = str(cursor.offset)
        if cursor.reverse:
            tokens["r"] = "1"
        if cursor.position is not None:
            tokens["p"] = cursor.position
        signed = self._signer.sign(urlencode(tokens, doseq=True))
        return replace_query_param(self.base_url, self.cursor_query_param,
                                   b64encode(signed.encode("ascii")).decode("ascii"))

    def decode_cursor(self, request) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            querystring = self._signer.unsign(b64decode(encoded.encode("ascii"), validate=True).decode("ascii"))
            tokens = parse_qs(querystring, keep_blank_values=True)
            offset = int(tokens.get("o", ["0"])[0])
            if not 0 <= offset <= self.offset_cutoff:
                raise ValueError("offset out of range")
            cursor = Cursor(offset=offset, reverse=tokens.get("r", ["0"])[0] == "1",
                            position=tokens.get("p", [None])[0])
        except (signing.BadSignature, ValueError, TypeError, UnicodeError, OverflowError, binascii.Error):
            raise InvalidCursor(self.invalid_cursor_message) from None
        if cursor is None or cursor.position is None:
            return cursor
        field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
        try:
            position = self._position(field, cursor.position)
        except (DjangoValidationError, ValueError, TypeError, OverflowError):
            raise InvalidCursor(self.invalid_cursor_message) from None
        return Cursor(offset=cursor.offset, reverse=cursor.reverse, position=position)

    @staticmethod
    def _position(field: models.Field, raw: str) -> str:
        if "\x00" in raw:
            raise ValueError("NUL in a cursor position")
        value = field.to_python(raw)
        if value is None:
            raise ValueError("empty cursor position")
        if isinstance(field, models.DateTimeField):
            if timezone.is_naive(value):
                value = timezone.make_aware(value, datetime.timezone.utc)
            value = value.astimezone(datetime.timezone.utc)  # OverflowError below year 1 / above 9999
            return value.isoformat()
        return str(value)
