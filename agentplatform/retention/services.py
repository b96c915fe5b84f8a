"""Retention runs and retention settings (docs/operations.md, "Retention and storage").

`retention_run` is not one transaction: it archives to files and deletes in many short
transactions (no long locks), under the tenant's retention lock, and is idempotent: a run
interrupted anywhere is completed by the next one, and a second run finds nothing more to do.
Call it outside any transaction.
"""
from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from agentplatform.retention import policy, request_archive, runtime_prune
from agentplatform.retention.locks import tenant_retention_lock
from agentplatform.retention.models import TenantRetention
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import is_platform_operator
from audit import archive as audit_archive
from audit import events
from audit.models import AuditEvent
from core import clock

logger = logging.getLogger(__name__)

# Requests per archive file.
REQUEST_CHUNK = 10_000


@dataclass
class RetentionReport:
    """What one tenant's run did (or, with dry_run, would do).

    days: the retention applied (RetentionDays.as_dict()). deleted: class -> rows deleted (or due,
    with dry_run): "run_events", "conversations", "requests", "audit". archives: one dict per file
    written (kind, path, sha256, rows, first_seq, last_seq). skipped: the tenant's lock was held by
    another run, nothing was done.
    """

    tenant_slug: str
    dry_run: bool
    days: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    archives: list[dict[str, Any]] = field(default_factory=list)
    skipped: bool = False


def _cut(now: datetime.datetime, days: int) -> datetime.datetime | None:
    return None if days == 0 else now - datetime.timedelta(days=days)


def _loop(prune, **kwargs) -> int:
    total = 0
    while True:
        count = prune(**kwargs)
        total += count
        if count < kwargs["batch"]:
            return total


def retention_run(*, tenant: Tenant, dry_run: bool = False, now: datetime.datetime | None = None,
                  root: Path | None = None, batch: int | None = None) -> RetentionReport:
    """Apply the tenant's retention (policy.days_for): delete old run events and conversations,
    archive then delete decided requests, archive then delete audit rows; then write one
    CONTROL_CHANGE audit row (events.retention_applied) saying what was archived and deleted.

    now: the clock (default clock.now()). root: the archive directory (default
    RETENTION_ARCHIVE_DIR). batch: rows per deleting transaction (default RETENTION_BATCH).
    dry_run: count what is due, write and delete nothing. Returns a RetentionReport. Raises
    audit.archive.ArchiveRefused when the online audit chain is broken (the audit part is not
    archived; what ran before it stays done), OSError when a file cannot be written.
    """
    now = now or clock.now()
    root = Path(root or settings.RETENTION_ARCHIVE_DIR)
    batch = batch or settings.RETENTION_BATCH
    days = policy.days_for(TenantRetention.objects.filter(tenant=tenant).first())
    report = RetentionReport(tenant_slug=tenant.slug, dry_run=dry_run, days=days.as_dict())
    with tenant_retention_lock(tenant.pk) as taken:
        if not taken:
            report.skipped = True
            return report
        if dry_run:
            _count_due(tenant, days, now, report)
            return report
        _apply(tenant, days, now, root, batch, report)
    if any(report.deleted.values()) or report.archives:
        _record(tenant, report)
    return report


def _count_due(tenant: Tenant, days: policy.RetentionDays, now: datetime.datetime, report: RetentionReport) -> None:
    if cut := _cut(now, days.run_event_days):
        report.deleted["run_events"] = runtime_prune.run_events_due(tenant_id=tenant.pk, before=cut).count()
    if cut := _cut(now, days.conversation_days):
        report.deleted["conversations"] = runtime_prune.conversations_due(tenant_id=tenant.pk, before=cut).count()
    if cut := _cut(now, days.request_days):
        report.deleted["requests"] = request_archive.requests_due(tenant_id=tenant.pk, before=cut).count()
    if cut := _cut(now, days.audit_days):
        first, last, _prev = audit_archive.audit_archive_bounds(tenant_id=tenant.pk, before=cut)
        report.deleted["audit"] = AuditEvent.objects.filter(
            tenant_id=tenant.pk, chain_seq__gte=first, chain_seq__lte=last).count() if last >= first else 0


def _apply(tenant: Tenant, days: policy.RetentionDays, now: datetime.datetime, root: Path, batch: int,
           report: RetentionReport) -> None:
    if cut := _cut(now, days.run_event_days):
        report.deleted["run_events"] = _loop(runtime_prune.run_events_prune, tenant_id=tenant.pk, before=cut,
                                             batch=batch)
    if cut := _cut(now, days.conversation_days):
        report.deleted["conversations"] = _loop(runtime_prune.conversations_prune, tenant_id=tenant.pk, before=cut,
                                                batch=batch)
    if cut := _cut(now, days.request_days):
        report.deleted["requests"] = 0
        while True:
            record, ids = request_archive.requests_archive_chunk(tenant_id=tenant.pk, tenant_slug=tenant.slug,
                                                                 before=cut, root=root, chunk=REQUEST_CHUNK)
            if record is None:
                break
            report.archives.append(_archive_dict(record))
            report.deleted["requests"] += request_archive.requests_delete(tenant_id=tenant.pk, before=cut, ids=ids,
                                                                          batch=batch)
            if len(ids) < REQUEST_CHUNK:
                break
    if cut := _cut(now, days.audit_days):
        _first, last, _prev = audit_archive.audit_archive_bounds(tenant_id=tenant.pk, before=cut)
        record = audit_archive.audit_archive_write(tenant_id=tenant.pk, tenant_slug=tenant.slug, last=last, root=root)
        if record is not None:
            report.archives.append(_archive_dict(record))
        # Also completes an earlier run that archived but stopped before deleting everything.
        report.deleted["audit"] = _loop(audit_archive.audit_archived_prune, tenant_id=tenant.pk, batch=batch)


def _archive_dict(record) -> dict[str, Any]:
    return {"kind": record.kind, "path": record.path, "sha256": record.sha256, "rows": record.rows,
            "first_seq": record.first_seq, "last_seq": record.last_seq}


@transaction.atomic(durable=True)
def _record(tenant: Tenant, report: RetentionReport) -> None:
    deleted = {k: v for k, v in report.deleted.items() if v}
    message = "retention: deleted " + (", ".join(f"{v} {k.replace('_', ' ')}" for k, v in deleted.items()) or "nothing")
    if report.archives:
        message += f"; archived {len(report.archives)} file(s)"
    events.retention_applied(tenant_id=tenant.pk, message=message, details={
        "object": {"type": "retention", "id": str(uuid.uuid4())}, "settings": report.days,
        "archives": report.archives, "deleted": report.deleted})
    logger.info("retention applied", extra={"tenant": tenant.slug, "deleted": report.deleted,
                                            "archives": len(report.archives)})


@transaction.atomic
def tenant_retention_set(*, actor: Any, tenant_id: int, values: dict[str, int | None]) -> TenantRetention:
    """Set a tenant's retention overrides (field -> days or None for the default).

    Checked by policy.check_setting for the actor's role (a platform operator or the tenant's
    administrator); the save is audited as a control change in this transaction (the control
    plane watches TenantRetention). Nests in the caller's transaction (the admin's form save), or
    is its own. Raises RetentionSettingRefused.
    """
    policy.check_setting(values, platform_operator=is_platform_operator(actor))
    row = TenantRetention.objects.filter(tenant_id=tenant_id).first() or TenantRetention(tenant_id=tenant_id)
    for name in policy.FIELDS:
        if name in values:
            setattr(row, name, values[name])
    row.save()
    return row
