"""Pagination of the API's lists: strict page numbers, signed cursors, and cursors that cannot
lose or repeat rows.

Page and cursor parameters are checked as the schema states them (`?page=` an integer 1..2**31-1,
`?page_size=` 1..the maximum; anything else is 400 INVALID_ARGUMENTS, a cursor this server did
not hand out 400 INVALID_CURSOR), where DRF would fall back to a default or answer 404/500.

Cursors that cannot lose or repeat rows:

DRF's CursorPagination encodes the position as the value of the *first* ordering field plus an
offset among rows sharing that value. When many rows share it (23 audit events written in the
same microsecond), following `previous` from a later page skips rows (16 of 21 came back in
such a test). The position must therefore be a key that is unique within the paginated queryset.
Every cursor-paginated list of the API uses `UniqueKeyCursorPagination`, which states that key
and refuses (ImproperlyConfigured) an ordering on anything else; `tests/api/test_pagination.py`
checks every view's paginator.
"""
from __future__ import annotations

import binascii
import datetime
import re
from base64 import b64decode, b64encode
from typing import Any
from urllib.parse import parse_qs, urlencode

from django.core import signing
from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import serializers
from rest_framework.pagination import Cursor, CursorPagination, PageNumberPagination
from rest_framework.response import Response
from rest_framework.exceptions import NotFound
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from agentplatform.api.errors import InvalidCursor
from core.errors import InvalidInputError


class UniqueKeyCursorPagination(CursorPagination):
    """Cursor pagination ordered on one unique key.

    ordering: a one-element tuple, the key ("-field" for descending). unique_within: the field the
    queryset is always filtered on when the key is unique only together with it (e.g. "tenant" for
    a per-tenant sequence), or "" when the key is unique on its own. Raises ImproperlyConfigured at
    the first page when the ordering is not such a key.
    """

    unique_within: str = ""

    def get_ordering(self, request, queryset, view):
        ordering = super().get_ordering(request, queryset, view)
        self.check_unique(queryset.model)
        return ordering

    @classmethod
    def check_unique(cls, model) -> None:
        """Raise ImproperlyConfigured unless `ordering` is one field that is unique in `model`
        (alone, or together with `unique_within` through a UniqueConstraint / unique_together)."""
        if len(cls.ordering) != 1 or not isinstance(cls.ordering, (tuple, list)):
            raise ImproperlyConfigured(f"{cls.__name__}.ordering must be one unique key, got {cls.ordering!r}")
        name = cls.ordering[0].lstrip("-")
        field = model._meta.get_field(name)
        if field.primary_key or field.unique:
            return
        wanted = {name, cls.unique_within} if cls.unique_within else {name}
        together = [set(c.fields) for c in model._meta.constraints if getattr(c, "fields", None)
                    and getattr(c, "condition", None) is None]
        together += [set(t) for t in model._meta.unique_together]
        if wanted in together:
            return
        raise ImproperlyConfigured(f"{cls.__name__} orders {model.__name__} on {name!r}, which is not unique"
                                   + (f" within {cls.unique_within!r}" if cls.unique_within else ""))


def strict_page_size(request, *, name: str, default: int, maximum: int) -> int:
    """`?<name>=` as the schema states it: absent -> `default`; else an integer 1..`maximum`.

    Raises InvalidInputError (400 INVALID_ARGUMENTS) otherwise; DRF would silently use the default or
    the maximum instead.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not PAGE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= maximum:
        raise InvalidInputError(f"{name} must be an integer from 1 to {maximum}")
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
            raise InvalidInputError(f"{self.page_query_param} must be an integer from 1 to {MAX_PAGE}")
        return super().paginate_queryset(queryset, request, view)


class CappedCountPagePagination(PagePagination):
    """`?page=N&page_size=M` as PagePagination, without counting a whole history:
    -> {count, count_capped, next, previous, results}.

    The page reads `page_size` + 1 rows (the extra one says whether a next page exists); `count`
    is exact up to COUNT_CAP and otherwise COUNT_CAP with `count_capped` true ("more than 1,000"),
    read from at most COUNT_CAP + 1 rows. A page past the last answers 404 NOT_FOUND, as before.
    A deep page still skips its OFFSET rows: its cost is the depth asked for, not the history.
    """

    count_cap = 1000

    def paginate_queryset(self, queryset, request, view=None):
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and (not PAGE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= MAX_PAGE):
            raise InvalidInputError(f"{self.page_query_param} must be an integer from 1 to {MAX_PAGE}")
        self.request = request
        size = self.get_page_size(request)
        self.number = int(raw) if raw is not None else 1
        start = (self.number - 1) * size
        rows = list(queryset[start:start + size + 1])
        if not rows and self.number > 1:
            raise NotFound("that page contains no results")
        self.has_next = len(rows) > size
        counted = queryset.order_by().values("pk")[:self.count_cap + 1].count()
        self.count, self.count_capped = min(counted, self.count_cap), counted > self.count_cap
        return rows[:size]

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        return replace_query_param(self.request.build_absolute_uri(), self.page_query_param, self.number + 1)

    def get_previous_link(self) -> str | None:
        if self.number <= 1:
            return None
        url = self.request.build_absolute_uri()
        if self.number == 2:
            return remove_query_param(url, self.page_query_param)
        return replace_query_param(url, self.page_query_param, self.number - 1)

    def get_paginated_response(self, data) -> Response:
        return Response({"count": self.count, "count_capped": self.count_capped, "next": self.get_next_link(),
                         "previous": self.get_previous_link(), "results": data})

    def get_paginated_response_schema(self, schema: dict) -> dict:
        shape = super().get_paginated_response_schema(schema)
        shape["properties"]["count"]["description"] = (
            f"Rows in the list, exact up to {self.count_cap}; {self.count_cap} with count_capped true when there "
            "are more (a count never reads the whole history).")
        shape["properties"]["count_capped"] = {"type": "boolean", "example": False,
                                               "description": f"True when the list holds more than {self.count_cap} "
                                                              "rows (count stops there)."}
        shape["required"] = [*shape.get("required", []), "count_capped"]
        return shape


def paginated_response(view: APIView, queryset: QuerySet, serializer_class: type[serializers.Serializer],
                       **context: Any) -> Response:
    """Paginate `queryset` with `view.pagination_class` and serialize the page."""
    paginator = view.pagination_class()
    page = paginator.paginate_queryset(queryset, view.request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True, context=context).data)


class StrictCursorPagination(CursorPagination):
    """DRF's CursorPagination, refusing with 400 INVALID_CURSOR every cursor it did not issue.

    DRF answers an undecodable cursor with 404 and hands a decodable one's position (`p=`) to the
    database as it is: `p=notadate` on a datetime ordering was a 500. Here the position
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
