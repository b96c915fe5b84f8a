"""Values written into a statement's text instead of bound as parameters.

psycopg prepares a statement on a connection after DB_PREPARE_THRESHOLD runs, and PostgreSQL may
then run its *generic* plan: one plan for every value of its parameters, made without them. Where
the right plan depends on the value (a status that only a few rows have, a time range of a day
against one of a year), the generic plan can walk the wrong index over a tenant's whole history
(docs/performance.md, "Plans that must not depend on a bound value"). A value written into the
text is seen by every plan, custom or generic. Only values the code formats itself go here: the
code's own identifiers and timestamps, never text a user typed.
"""
from __future__ import annotations

import datetime
import re

from django.db.models import BigIntegerField, DateTimeField, Expression
from django.db.models.expressions import RawSQL

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMESTAMP = re.compile(r"[0-9T:. +-]+")


def identifier_sql(value: str) -> str:
    """`value` quoted as an SQL string literal ('PENDING'). value: one of the code's own names
    (letters, digits, underscores). Raises ValueError for anything else."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ValueError(f"only the code's own identifiers are written into a statement, not {value!r}")
    return f"'{value}'"


def integer_literal(value: int) -> RawSQL:
    """`value` (an int the code computed, such as a chain position) as a literal of the
    statement, for the right-hand side of a lookup: `rows.filter(chain_seq__gte=integer_literal(n))`.
    Raises TypeError for anything but an int (bool included)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"integer_literal takes an int, not {value!r}")
    return RawSQL(str(value), (), output_field=BigIntegerField())


class TimestampLiteral(Expression):
    """An aware datetime written into the statement as a literal, for the right-hand side of a
    lookup on a DateTimeField: `rows.filter(occurred_at__gte=TimestampLiteral(since))`.

    Formatted as the connection stores it (`connection.ops.adapt_datetimefield_value`: an ISO
    timestamp with its UTC offset on PostgreSQL, Django's own text form in UTC on SQLite), so a
    comparison means what the bound value meant. Raises TypeError for anything but an aware
    datetime.
    """

    output_field = DateTimeField()

    def __init__(self, value: datetime.datetime) -> None:
        if not isinstance(value, datetime.datetime) or value.utcoffset() is None:
            raise TypeError(f"TimestampLiteral takes an aware datetime, not {value!r}")
        super().__init__()
        self.value = value

    def __repr__(self) -> str:
        return f"TimestampLiteral({self.value!r})"

    def as_sql(self, compiler, connection):
        adapted = connection.ops.adapt_datetimefield_value(self.value)
        if isinstance(adapted, datetime.datetime):
            adapted = adapted.isoformat()  # with its offset: no conversion that could leave year 9999
        text = str(adapted)
        if not _TIMESTAMP.fullmatch(text):  # digits and separators only: nothing to escape
            raise ValueError(f"unexpected timestamp text {text!r}")
        if connection.vendor == "postgresql":
            return f"'{text}'::timestamptz", ()
        return f"'{text}'", ()
