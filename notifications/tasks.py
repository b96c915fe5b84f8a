"""Celery tasks of notifications: thin wrappers around notifications.services (the webhook
delivery task lives beside the attempt it retries, in notifications.delivery).

Not `acks_late`: a redelivered task would find its notices claimed and send nothing
(notifications.ledger), but a worker that died after claiming and before sending loses that notice
rather than risking a second email.
"""
from __future__ import annotations

from celery import shared_task

from notifications import services


@shared_task(name="notifications.notify_approvers", ignore_result=True)
def notify_approvers(request_id: str, replaces: list[str] | None = None, again: bool = False) -> dict[str, int]:
    """Email the people who may decide request `request_id` and start its webhooks. replaces: the
    ids of the older requests it superseded; again: it waits again under a stricter policy."""
    return services.notify_approvers(request_id=request_id, replaces=replaces or (), again=again)


@shared_task(name="notifications.notify_requester", ignore_result=True)
def notify_requester(request_id: str) -> dict[str, int]:
    """Email the requester how request `request_id` was decided and start its webhooks."""
    return services.notify_requester(request_id=request_id)


@shared_task(name="notifications.notify_revised", ignore_result=True)
def notify_revised(request_id: str, revision: int) -> dict[str, int]:
    """Email the approvers who must decide revision `revision` of request `request_id` again."""
    return services.notify_revised(request_id=request_id, revision=revision)


@shared_task(name="notifications.notify_retraction", ignore_result=True)
def notify_retraction(request_id: str, ending: str, replaced_by: str | None = None) -> dict[str, int]:
    """Email the approvers asked about request `request_id` that it no longer needs them (`ending`)."""
    return services.notify_retraction(request_id=request_id, ending=ending, replaced_by=replaced_by)
