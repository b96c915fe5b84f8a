"""The record of notices sent (notifications.models.Notice): claim one before sending it, mark it
sent or failed after, and read who was told about a request.

A claim is one `INSERT ... ON CONFLICT DO NOTHING` in autocommit and its row count decides: of two
signals, two retries or two workers racing on the same (request, recipient, kind, revision),
exactly one inserts the row and sends; the others skip. Not read-then-write: on PostgreSQL the
second INSERT waits for the first one's commit and then does nothing.
"""
from __future__ import annotations

from django.db import connection

from core import clock
from core.sql.values import column_values
from notifications.models import Notice

Kind = Notice.Kind
# The notices that asked a person to decide a request: they are the ones a retraction answers.
ASKED = (Kind.REQUESTED, Kind.REGATED, Kind.REVISED)


def claim(*, request, kind: str, revision: int, recipient_id: int | None = None,
          endpoint_id: int | None = None) -> bool:
    """Record that the notice `kind` about `request` (revision `revision`) goes to the user
    `recipient_id` or to the webhook endpoint `endpoint_id` (exactly one of them). Returns True
    when this call recorded it (send it now), False when it was recorded before (send nothing).
    Runs in the caller's transaction or autocommit; never raises for a duplicate."""
    if (recipient_id is None) == (endpoint_id is None):
        raise ValueError("a notice goes to a person or to an endpoint")
    values = {"tenant_id": request.tenant_id, "request_id": request.pk, "recipient_id": recipient_id,
              "endpoint_id": endpoint_id, "kind": kind, "revision": revision}
    columns, params = column_values(Notice, values, adding=True)
    quote = connection.ops.quote_name
    # No conflict target: the two partial unique constraints (person, endpoint) both count.
    sql = (f"INSERT INTO {quote(Notice._meta.db_table)} ({', '.join(map(quote, columns))}) "
           f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount == 1


def settle(*, request, kind: str, revision: int, recipient_ids=(), endpoint_id: int | None = None,
           error: str = "") -> int:
    """Mark the claimed notices sent (or failed, with `error`). Returns the rows changed."""
    rows = Notice.objects.filter(request_id=request.pk, kind=kind, revision=revision, sent_at__isnull=True,
                                 error="")
    rows = rows.filter(endpoint_id=endpoint_id) if endpoint_id is not None else rows.filter(
        recipient_id__in=list(recipient_ids))
    return rows.update(error=error[:300]) if error else rows.update(sent_at=clock.now())


def asked(request) -> set[int]:
    """The users who were asked to decide `request` (a REQUESTED, REGATED or REVISED notice not
    failed)."""
    return set(Notice.objects.filter(request_id=request.pk, kind__in=ASKED, recipient__isnull=False, error="")
               .values_list("recipient_id", flat=True))
