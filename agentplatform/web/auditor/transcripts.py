"""Reads for the auditor's transcript pages: one conversation or run of the auditor's tenant, with
its messages or events and the audit rows about it; another tenant's or an unknown id is None.
Text shown goes through masking (core.redaction.text), as everything that leaves the records."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from audit.models import AuditEvent
from core.redaction.text import mask_json, mask_text
from tools.display import tool_label

MAX_ITEMS = 500  # a transcript longer than this shows its first MAX_ITEMS items and says so


@dataclass(frozen=True)
class Line:
    """One message or event: who/what, when, masked text."""

    kind: str
    at: Any
    text: str
    tool_calls: str = ""


def conversation_for(*, tenant_id: int, conversation_id: uuid.UUID) -> Conversation | None:
    """The conversation `conversation_id` of tenant `tenant_id` (its user loaded), or None."""
    return Conversation.objects.select_related("user").filter(pk=conversation_id, tenant_id=tenant_id).first()


def run_for(*, tenant_id: int, run_id: uuid.UUID) -> Run | None:
    """The run `run_id` of tenant `tenant_id` (user and conversation loaded), or None."""
    return Run.objects.select_related("user", "conversation").filter(pk=run_id, tenant_id=tenant_id).first()


def _calls(calls: Any) -> str:
    if not calls:
        return ""
    shown = []
    for call in calls if isinstance(calls, list) else []:
        function = (call or {}).get("function") or {}
        shown.append(f"{tool_label(str(function.get('name', '')))}: ({mask_text(str(function.get('arguments', '')))})")
    return "; ".join(shown)


def conversation_lines(conversation: Conversation) -> tuple[list[Line], bool]:
    """Its messages, oldest first, masked; and whether more than MAX_ITEMS exist."""
    rows = list(Message.objects.filter(conversation=conversation).order_by("created_at", "id")
                .values("role", "content", "tool_calls", "tool_call_id", "created_at")[:MAX_ITEMS + 1])
    lines = [Line(kind=r["role"], at=r["created_at"], text=mask_text(r["content"] or ""),
                  tool_calls=_calls(r["tool_calls"])) for r in rows[:MAX_ITEMS]]
    return lines, len(rows) > MAX_ITEMS


def conversation_runs(conversation: Conversation) -> list[Run]:
    """Its runs, oldest first (at most MAX_ITEMS)."""
    return list(Run.objects.filter(conversation=conversation).order_by("created_at")[:MAX_ITEMS])


def run_lines(run: Run) -> tuple[list[Line], bool]:
    """Its events in order (type, time, masked payload as compact JSON); and whether more exist."""
    rows = list(RunEvent.objects.filter(run=run).order_by("seq").values("type", "payload", "created_at")
                [:MAX_ITEMS + 1])
    lines = [Line(kind=r["type"], at=r["created_at"],
                  text=json.dumps(mask_json(r["payload"]), ensure_ascii=False, sort_keys=True)[:2000])
             for r in rows[:MAX_ITEMS]]
    return lines, len(rows) > MAX_ITEMS


def audit_rows_about(*, tenant_id: int, run_id: uuid.UUID | None = None,
                     conversation_id: uuid.UUID | None = None) -> list[AuditEvent]:
    """The tenant's audit rows of a run or a conversation, oldest first (at most MAX_ITEMS)."""
    rows = AuditEvent.objects.filter(tenant_id=tenant_id).select_related("actor")
    rows = rows.filter(run_id=run_id) if run_id is not None else rows.filter(conversation_id=conversation_id)
    return list(rows.order_by("chain_seq")[:MAX_ITEMS])
