"""Streamed exports of the audit trail: JSON Lines and CSV, written chunk by chunk, with the chain
columns (audit.export; the rows and their shape live there, shared with the auditor's page).
"""
from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from rest_framework.renderers import BaseRenderer

from audit.export import COLUMNS, EXPORT_COLUMNS, csv_lines, event_row, export_row, jsonl_lines

__all__ = ["COLUMNS", "EXPORT_COLUMNS", "CSVRenderer", "JSONLinesRenderer", "csv_lines", "event_row", "export_row",
           "jsonl_lines"]


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
