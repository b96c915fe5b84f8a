"""Deleting old run events and old conversations (with their messages and runs). Not archived:
they hold the text of the chats, which retention exists to remove; every decision on a tool call
stays in the audit trail and the requests' archive (docs/operations.md, "Retention and storage").

Never deleted: anything of a run that is RUNNING or AWAITING_CONFIRMATION, nor of a conversation
or run that a PENDING or CONFIRMED confirmation request names (its resume needs them).
"""
from __future__ import annotations

import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from approvals.models import ConfirmationRequest

FINISHED = (Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.CANCELLED)


def _open_requests(tenant_id: int) -> QuerySet[ConfirmationRequest]:
    return ConfirmationRequest.objects.filter(tenant_id=tenant_id).pending_or_confirmed()


def run_events_due(*, tenant_id: int, before: datetime.datetime) -> QuerySet[RunEvent]:
    """Events of the tenant's finished runs last touched before `before`, except runs an open
    request names."""
    waited_on = _open_requests(tenant_id).filter(run_id=OuterRef("run_id"))
    return (RunEvent.objects.filter(run__tenant_id=tenant_id, run__status__in=FINISHED, run__updated_at__lt=before)
            .exclude(Exists(waited_on)))


def conversations_due(*, tenant_id: int, before: datetime.datetime) -> QuerySet[Conversation]:
    """The tenant's conversations with nothing since `before` (no newer message or run update), no
    run still running or waiting, and no open request."""
    busy_run = Run.objects.filter(conversation_id=OuterRef("pk")).filter(
        Q(updated_at__gte=before) | ~Q(status__in=FINISHED))
    new_message = Message.objects.filter(conversation_id=OuterRef("pk"), created_at__gte=before)
    open_request = _open_requests(tenant_id).filter(conversation_id=OuterRef("pk"))
    return (Conversation.objects.filter(tenant_id=tenant_id, updated_at__lt=before)
            .exclude(Exists(busy_run)).exclude(Exists(new_message)).exclude(Exists(open_request)))


def run_events_prune(*, tenant_id: int, before: datetime.datetime, batch: int) -> int:
    """Delete up to `batch` due run events (run_events_due) in one short transaction; return how many."""
    with transaction.atomic():
        ids = list(run_events_due(tenant_id=tenant_id, before=before).order_by("pk").values_list("pk", flat=True)[:batch])
        if ids:
            RunEvent.objects.filter(pk__in=ids).delete()
    return len(ids)


def conversations_prune(*, tenant_id: int, before: datetime.datetime, batch: int) -> int:
    """Delete up to `batch` due conversations (conversations_due) with their messages, runs and
    run events, in one short transaction (the due rows are locked and re-checked in it); return
    how many conversations went."""
    with transaction.atomic():
        ids = list(conversations_due(tenant_id=tenant_id, before=before).order_by("pk")
                   .values_list("pk", flat=True)[:batch])
        if not ids:
            return 0
        # Lock the runs, then re-check under the lock: a resume that started meanwhile keeps its conversation.
        list(Run.objects.filter(conversation_id__in=ids).order_by("pk").select_for_update(of=("self",))
             .values_list("pk", flat=True))
        ids = list(conversations_due(tenant_id=tenant_id, before=before).filter(pk__in=ids).values_list("pk", flat=True))
        Message.objects.filter(conversation_id__in=ids).delete()
        RunEvent.objects.filter(run__conversation_id__in=ids).delete()
        Run.objects.filter(conversation_id__in=ids).delete()
        Conversation.objects.filter(pk__in=ids).delete()
    return len(ids)
