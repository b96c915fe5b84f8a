"""Celery tasks of notifications: thin wrappers around notifications.services (the webhook
delivery task lives beside the attempt it retries, in notifications.delivery).

Not `acks_late`: a notification is not idempotent (a second delivery is a second email), so a
worker that dies mid-task loses that notification rather than sending it twice.
"""
from __future__ import annotations


from celery import shared_task

from notifications import services


@shared_task(name="notifications.notify_approvers", ignore_result=True)
def notify_approvers(request_id: str) -> dict[str, int]:
    """Email the people who may decide request `request_id` and start its webhooks."""
    return services.notify_approvers(request_id=request_id)


@shared_task(name="notifications.notify_requester", ignore_result=True)
def notify_requester(request_id: str) -> dict[str, int]:
    """Email the requester how request `request_id` was decided and start its webhooks."""
    return services.notify_requester(request_id=request_id)
