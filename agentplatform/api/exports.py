"""Streamed exports of the audit trail: JSON Lines and CSV, written chunk by chunk.

Rows are read in keyset pages of EXPORT_BATCH (occurred_at, id), so no cursor or transaction stays
open while the client downloads.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q, QuerySet
from rest_framework.renderers import BaseRenderer

from core.redaction.endpoints import recorded_event_shown
from core.redaction.text import mask_json, mask_text
from audit.models import AuditEvent

EXPORT_BATCH = 500
COLUMNS = ["id", "occurred_at", "actor", "tool_name", "tool_owner", "tool_version", "decision", "policy_decision", "status",
           "request_id",
           "conversation_id", "run_id", "tool_call_id", "arguments_hash", "masked_arguments", "confirmation_id",
           "idempotency_key", "business_result_id", "duration_ms", "message"]
# Spreadsheets run cells that start with these as formulas (CSV injection): such cells get a quote.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


class JSONLinesRenderer(BaseRenderer):
    """`?format=jsonl` or `Accept: application/x-ndjson` (the view streams the body)."""

    media_type = "application/x-ndjson"
    format = "jsonl"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return json.dumps(data, cls=DjangoJSONEncoder).encode("utf-8")


class CSVRenderer(JSONLinesRenderer):
    """`?format=csv` or `Accept: text/csv` (the view streams the body; only errors are rendered here)."""

    media_type = "text/csv"
    format = "csv"


def event_row(event: AuditEvent) -> dict[str, Any]:
    """One audit event as a flat dict (the JSON, JSON Lines and CSV shape). A location recorded
    before the trail stopped recording secrets (an MCP server's URL as typed, its command line) is
    shown as rows record it now (core.redaction.endpoints.recorded_event_shown)."""
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
    }


def _batches(rows: QuerySet[AuditEvent]) -> Iterator[list[AuditEvent]]:
    """`rows` (ordered by occurred_at, id) in keyset pages; each page is one short query."""
    last: AuditEvent | None = None
    while True:
        page = rows
        if last is not None:
            page = page.filter(Q(occurred_at__gt=last.occurred_at) | Q(occurred_at=last.occurred_at, id__gt=last.id))
        batch = list(page.order_by("occurred_at", "id")[:EXPORT_BATCH])
        if not batch:
            return
        yield batch
        if len(batch) < EXPORT_BATCH:
            return
        last = batch[-1]


def jsonl_lines(rows: QuerySet[AuditEvent]) -> Iterator[bytes]:
    """One JSON object per line (UTF-8), oldest first."""
    for batch in _batches(rows):
        yield "".join(json.dumps(event_row(e), ensure_ascii=False, cls=DjangoJSONEncoder) + "\n"
                      for e in batch).encode("utf-8")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def csv_lines(rows: QuerySet[AuditEvent]) -> Iterator[bytes]:
    """A header line then one line per event, oldest first; cells that a spreadsheet would run as
    a formula are prefixed with a quote."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    yield buffer.getvalue().encode("utf-8")
    for batch in _batches(rows):
        buffer.seek(0)
        buffer.truncate()
        for event in batch:
            row = event_row(event)
            writer.writerow([_cell(row[c]) for c in COLUMNS])
        yield buffer.getvalue().encode("utf-8")
