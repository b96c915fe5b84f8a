"""Exports of the audit trail (JSON Lines and CSV), streamed in keyset batches, WITH the chain
columns, so a file can be checked away from the platform (`python -m audit.verify_export FILE`,
docs/audit.md "Checking an export").

Every column the row hash covers is written in the form the hash reads it (audit.chain: UTC
timestamps with microseconds, ids, integral floats as integers), then `chain_seq`, `prev_hash`,
`row_hash` and `body_sha256` (SHA-256 of the canonical JSON). `actor` (a username) and
`business_object` are conveniences outside the hash. A row whose arguments or message are shown
otherwise than stored (a location recorded before the trail stopped recording secrets,
core.redaction.endpoints) is exported as shown with `redacted` true: its content can then be
checked only through `body_sha256`, and the verifier says how many such rows it met.

Rows are read by chain position in batches of EXPORT_BATCH (one short query each: no cursor or
transaction stays open while the client downloads); rows without a position (inserted around the
chain) come last, so the verifier names them.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import QuerySet

from audit.chain import CHAIN_FIELDS, UNHASHED_FIELDS, canonical_json
from audit.models import AuditEvent
from core.redaction.endpoints import recorded_event_shown
from core.redaction.text import mask_json, mask_text

EXPORT_BATCH = 500
EXPORT_WINDOW = EXPORT_BATCH  # chain positions one batch query may span
COLUMNS = ["id", "occurred_at", "actor", "tool_name", "tool_owner", "tool_version", "decision", "policy_decision",
           "status", "request_id", "conversation_id", "run_id", "tool_call_id", "arguments_hash", "masked_arguments",
           "confirmation_id", "idempotency_key", "business_result_id", "duration_ms", "message"]
CHAIN_COLUMNS = ["tenant_id", "actor_id", "execution", "policy_version", "policy_rules", "channel", "business_object",
                 "chain_seq", "prev_hash", "row_hash", "body_sha256", "redacted"]
EXPORT_COLUMNS = COLUMNS + CHAIN_COLUMNS
JSON_COLUMNS = ("masked_arguments", "execution", "policy_rules", "channel")
# Spreadsheets run cells that start with these as formulas (CSV injection): such cells get a quote,
# and so does a cell that starts with a quote, so the verifier can take exactly one off.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "'")


def event_row(event: AuditEvent) -> dict[str, Any]:
    """One audit event as a flat dict (the API's JSON shape). A location recorded before the trail
    stopped recording secrets (an MCP server's URL as typed, its command line) is shown as rows
    record it now (core.redaction.endpoints.recorded_event_shown)."""
    masked_arguments, message = recorded_event_shown(event.masked_arguments, event.message)
    return {
        "id": str(event.id), "occurred_at": event.occurred_at.isoformat(),
        "actor": event.actor.username if event.actor_id else None, "tool_name": event.tool_name,
        "tool_owner": event.tool_owner, "tool_version": event.tool_version,
        "decision": event.decision, "policy_decision": event.policy_decision, "status": event.status,
        "request_id": event.request_id,
        "conversation_id": str(event.conversation_id) if event.conversation_id else None,
        "run_id": str(event.run_id) if event.run_id else None, "tool_call_id": event.tool_call_id,
        "arguments_hash": event.arguments_hash, "masked_arguments": mask_json(masked_arguments),
        "confirmation_id": str(event.confirmation_id) if event.confirmation_id else None,
        "idempotency_key": event.idempotency_key, "business_result_id": event.business_result_id,
        "duration_ms": event.duration_ms, "message": mask_text(message),
        "channel": event.channel,
    }


def export_row(event: AuditEvent) -> dict[str, Any]:
    """One event as exported: EXPORT_COLUMNS -> value, chained columns as the hash reads them."""
    values = {f.attname: getattr(event, f.attname) for f in AuditEvent._meta.concrete_fields}
    body_text = canonical_json(values)
    body = json.loads(body_text)
    shown = event_row(event)
    row: dict[str, Any] = {"actor": shown["actor"]}
    for name in EXPORT_COLUMNS:
        if name in values and name not in UNHASHED_FIELDS:
            row[name] = body.get(name, "" if isinstance(values[name], str) else None)
    redacted = False
    for name in ("masked_arguments", "message"):
        if (shown[name] or None) != (body.get(name) or None):
            row[name], redacted = shown[name], True
    row.update({name: values[name] for name in CHAIN_FIELDS})
    row["business_object"] = event.business_object
    row["body_sha256"] = _sha256(body_text)
    row["redacted"] = redacted
    return row


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def export_batches(rows: QuerySet[AuditEvent]) -> Iterator[list[AuditEvent]]:
    """`rows` (one tenant's, any order) by chain position in keyset pages, then those without one.

    The walk runs between the first and last chain positions of the matching rows (_chain_bounds),
    in windows of EXPORT_WINDOW positions, so an export of a range reads that range's positions,
    not the chain from its start to the range and on to the head, and N days cost about N times
    one day. Chain positions and times need not agree row by row; the bounds are the matching
    rows' own, so no row is lost. A sparse filter over a long trail costs one short query per
    window (a rare tool over 1,000,000 positions: 2,000 index probes).
    """
    rows = rows.select_related("actor").order_by()
    bounds = _chain_bounds(rows)
    if bounds["first"] is not None:
        # Each batch reads a window of at most EXPORT_WINDOW chain positions: PostgreSQL then walks
        # the chain index (tenant, chain_seq), or the filter's own, in order, instead of reading
        # the whole time range from the time index and sorting it again for every batch.
        last, end = bounds["first"] - 1, bounds["last"]
        while last < end:
            upto = min(last + EXPORT_WINDOW, end)
            batch = list(rows.filter(chain_seq__gt=last, chain_seq__lte=upto).order_by("chain_seq")[:EXPORT_BATCH])
            if batch:
                yield batch
            last = batch[-1].chain_seq if len(batch) == EXPORT_BATCH else upto
    stray = list(rows.filter(chain_seq__isnull=True).order_by("occurred_at", "id")[:EXPORT_BATCH])
    if stray:
        yield stray


def _chain_bounds(rows: QuerySet[AuditEvent]) -> dict[str, int | None]:
    """{"first", "last"}: the lowest and highest chain position among `rows` (None when none).

    Read from the matching rows themselves (a subquery the planner may not turn into "walk the
    chain index from its start until a row matches", which is what MIN() alone becomes): the
    cost is that of the rows the export reads anyway.
    """
    if rows.query.is_empty():
        return {"first": None, "last": None}
    sql, params = rows.filter(chain_seq__isnull=False).order_by().values("chain_seq").query.sql_with_params()
    fence = " OFFSET 0" if connection.vendor == "postgresql" else ""  # keeps the subquery a subquery
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MIN(chain_seq), MAX(chain_seq) FROM ({sql}{fence}) AS matching", params)
        first, last = cursor.fetchone()
    return {"first": first, "last": last}


def jsonl_lines(rows: QuerySet[AuditEvent]) -> Iterator[bytes]:
    """One JSON object per line (UTF-8), in chain order."""
    for batch in export_batches(rows):
        yield "".join(json.dumps(export_row(e), ensure_ascii=False, cls=DjangoJSONEncoder) + "\n"
                      for e in batch).encode("utf-8")


def csv_cell(name: str, value: Any) -> str:
    """The CSV text of one value: "" for null, JSON for the JSON columns, "true"/"" for flags; a
    cell a spreadsheet would run as a formula (or one starting with a quote) gets a leading quote."""
    if value is None or value is False:
        return ""
    if value is True:
        return "true"
    if name in JSON_COLUMNS or isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    else:
        text = str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def csv_lines(rows: QuerySet[AuditEvent]) -> Iterator[bytes]:
    """A header line (EXPORT_COLUMNS) then one line per event, in chain order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_COLUMNS)
    yield buffer.getvalue().encode("utf-8")
    for batch in export_batches(rows):
        buffer.seek(0)
        buffer.truncate()
        for event in batch:
            row = export_row(event)
            writer.writerow([csv_cell(c, row[c]) for c in EXPORT_COLUMNS])
        yield buffer.getvalue().encode("utf-8")
