"""Helpers of the retention tests: audit rows, the days in force, a run at a chosen moment."""
from __future__ import annotations

import datetime
import io
from contextlib import redirect_stdout
from pathlib import Path

from audit import events
from audit.models import AuditEvent
from audit.verify_export import main as verify_export_main

DAY = datetime.timedelta(days=1)


def audit_rows(user, n: int, prefix: str = "row") -> list[AuditEvent]:
    """`n` EXECUTED rows of `user`'s tenant, written through the one audit writer."""
    return [events.tool_call_decided(tenant_id=user.tenant_id, actor_id=user.pk, decision="EXECUTED",
                                     tool_name="cancel_order", status="OK",
                                     masked_arguments={"order_id": f"A{i:012d}", "amount": 1.5 + i},
                                     duration_ms=2.0, message=f"{prefix} {i}")
            for i in range(n)]


def only_audit_retention(settings, *, audit_days: int = 400) -> None:
    """Keep everything but the audit trail forever, so a test sees the audit part alone."""
    settings.RETENTION_RUN_EVENT_DAYS = 0
    settings.RETENTION_CONVERSATION_DAYS = 0
    settings.RETENTION_REQUEST_DAYS = 0
    settings.RETENTION_AUDIT_DAYS = audit_days
    settings.RETENTION_AUDIT_MIN_DAYS = min(audit_days, 365)


def now_cutting_before(row: AuditEvent, days: int = 400) -> datetime.datetime:
    """The moment at which a retention of `days` cuts just before `row` (rows older than it go)."""
    return row.occurred_at + datetime.timedelta(days=days)


def verify_file(path: Path, *args: str) -> tuple[int, str]:
    """`python -m audit.verify_export PATH ARGS` in-process; (exit status, printed text)."""
    out = io.StringIO()
    with redirect_stdout(out):
        status = verify_export_main([str(path), *args])
    return status, out.getvalue()
