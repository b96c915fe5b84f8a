"""Strict request input: serializers and fields that refuse what the schema does not allow
instead of coercing it (DRF turns "5" into 5, ignores unknown fields, reads a date as midnight),
each with its rule in the OpenAPI schema."""
from __future__ import annotations

import re
import uuid
from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

from agentplatform.api.schema import NO_NUL_PATTERN, NON_BLANK_PATTERN
from core.text import unstorable_reason


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


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text, and text
    PostgreSQL cannot store (DRF refuses NUL already; a JSON body can also escape a lone surrogate:
    core.text), with its text rule as a validator drf-spectacular writes into the schema as
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
