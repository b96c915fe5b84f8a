"""Archiving and deleting decided confirmation requests with their approvals, claims and views
(docs/operations.md, "Retention and storage").

A request is due when it was created before the cut, is decided (neither PENDING nor CONFIRMED),
its run is not RUNNING or AWAITING_CONFIRMATION (a resume reads every request of its turn), and
no row outside approvals still points at it with a protected key (a policy limit's usage row, an
MCP call): those keep it online until they go. Each chunk of due requests is written as JSON Lines
(one request per line with its approvals and views; the raw arguments and the token digest are
left out, text goes through masking) with a manifest, recorded as a RetentionArchive of kind
REQUESTS, and only then deleted, in short transactions.
"""
from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from agentplatform.runtime.models import Run
from approvals.models import Approval, ConfirmationRequest, RequestView
from audit.archive import archive_alias, write_archive_file, write_manifest
from audit.models import RetentionArchive
from core.redaction.text import mask_json, mask_text

# Kept out of the archive: what would run (raw, unmasked) and the token's digest.
LEFT_OUT = ("arguments", "token_hash")
TEXT = ("summary", "context_excerpt", "decision_reason")
ACTIVE_RUN = (Run.Status.RUNNING, Run.Status.AWAITING_CONFIRMATION)


def _protected_references() -> list[tuple[type[models.Model], str]]:
    """(model, field name) of every protected foreign key to ConfirmationRequest outside the
    approvals rows this module deletes itself (read from the model registry, so no app above is
    imported)."""
    found = []
    for relation in ConfirmationRequest._meta.related_objects:
        if relation.on_delete is models.PROTECT and relation.related_model is not Approval:
            found.append((relation.related_model, relation.field.name))
    return found


def requests_due(*, tenant_id: int, before: datetime.datetime) -> QuerySet[ConfirmationRequest]:
    """The tenant's decided requests created before `before` that nothing online still needs."""
    due = (ConfirmationRequest.objects.filter(tenant_id=tenant_id, created_at__lt=before)
           .exclude(status__in=ConfirmationRequest.NOT_YET_RUN)
           .exclude(Exists(Run.objects.filter(pk=OuterRef("run_id"), status__in=ACTIVE_RUN))))
    for model, field in _protected_references():
        due = due.exclude(Exists(model._default_manager.filter(**{field: OuterRef("pk")})))
    return due


def _plain(instance: models.Model, *, left_out: tuple[str, ...] = ()) -> dict[str, Any]:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields if f.name not in left_out}


def request_record(request: ConfirmationRequest, approvals: list[Approval], views: list[RequestView]) -> dict[str, Any]:
    """One archived request: its columns (LEFT_OUT excepted, text masked), its approvals and views."""
    row = _plain(request, left_out=LEFT_OUT)
    for name in TEXT:
        row[name] = mask_text(row[name] or "")
    row["masked_arguments"] = mask_json(row["masked_arguments"])
    row["approval_context"] = mask_json(row["approval_context"])
    return {"request": row,
            "approvals": [{**_plain(a), "comment": mask_text(a.comment or ""), "changes": mask_json(a.changes)}
                          for a in approvals],
            "views": [_plain(v) for v in views]}


def _lines(requests: list[ConfirmationRequest]) -> Iterator[bytes]:
    ids = [r.pk for r in requests]
    approvals: dict[Any, list[Approval]] = {}
    for approval in Approval.objects.filter(request_id__in=ids).order_by("request_id", "created_at", "pk"):
        approvals.setdefault(approval.request_id, []).append(approval)
    views: dict[Any, list[RequestView]] = {}
    for view in RequestView.objects.filter(request_id__in=ids).order_by("request_id", "viewed_at", "pk"):
        views.setdefault(view.request_id, []).append(view)
    for request in requests:
        record = request_record(request, approvals.get(request.pk, []), views.get(request.pk, []))
        yield (json.dumps(record, ensure_ascii=False, sort_keys=True, cls=DjangoJSONEncoder) + "\n").encode("utf-8")


def requests_archive_chunk(*, tenant_id: int, tenant_slug: str, before: datetime.datetime, root: Path,
                           chunk: int) -> tuple[RetentionArchive | None, list[Any]]:
    """Archive up to `chunk` due requests (oldest first) to `root`/<slug>/requests-<time>-<first id>.jsonl
    with its manifest and record it; return (the record, the archived ids), or (None, []) when
    none is due. Raises OSError when the file cannot be written (nothing recorded or deleted)."""
    requests = list(requests_due(tenant_id=tenant_id, before=before).order_by("created_at", "pk")[:chunk])
    if not requests:
        return None, []
    created_at = timezone.now()
    relative = f"{tenant_slug}/requests-{created_at:%Y%m%dT%H%M%S%f}-{requests[0].pk}.jsonl"
    path = root / relative
    sha256, _size = write_archive_file(path, _lines(requests))
    ids = [r.pk for r in requests]
    write_manifest(path, {"kind": RetentionArchive.Kind.REQUESTS, "tenant": tenant_slug, "tenant_id": tenant_id,
                          "file": path.name, "rows": len(requests), "sha256": sha256,
                          "first_created_at": requests[0].created_at.isoformat(),
                          "last_created_at": requests[-1].created_at.isoformat(),
                          "created_before": before.isoformat(), "created_at": created_at.isoformat()})
    record = RetentionArchive.objects.using(archive_alias()).create(tenant_id=tenant_id, kind=RetentionArchive.Kind.REQUESTS, path=relative,
                                                               sha256=sha256, rows=len(requests),
                                                               created_at=created_at)
    return record, ids


def requests_delete(*, tenant_id: int, before: datetime.datetime, ids: list[Any], batch: int) -> int:
    """Delete the archived requests `ids` that are still due, with their approvals, claims, views and
    notifications, `batch` at a time, each batch one short transaction; return how many went."""
    deleted = 0
    for start in range(0, len(ids), batch):
        with transaction.atomic():
            still_due = list(requests_due(tenant_id=tenant_id, before=before)
                             .filter(pk__in=ids[start:start + batch]).order_by("pk")
                             .select_for_update(of=("self",)).values_list("pk", flat=True))
            Approval.objects.filter(request_id__in=still_due).delete()
            ConfirmationRequest.objects.filter(pk__in=still_due).delete()
            deleted += len(still_due)
    return deleted
