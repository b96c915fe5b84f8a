"""Receivers on approvals' signals: start the notifications once the decision has committed."""
from __future__ import annotations

from django.db import transaction

from approvals.models import ConfirmationRequest
from notifications.dispatch import dispatch
from notifications.tasks import notify_approvers, notify_requester

Status = ConfirmationRequest.Status
# Endings the requester is told about (notify_requester decides which of them concern it).
TOLD = (Status.CONFIRMED, Status.CANCELLED, Status.EXPIRED)


def on_approvers_needed(sender, *, request_id, tenant_id, **kwargs) -> None:
    """`approvers_needed`: after commit, notify the people who may decide the request."""
    transaction.on_commit(lambda: dispatch(notify_approvers, str(request_id)))


def on_settled(sender, *, request_id, run_id, status, policy=None, **kwargs) -> None:
    """`confirmation_settled`: after commit, tell the requester of an approver-gated request (a
    requester-confirmed one was decided by the requester: nothing to tell, no query)."""
    if status not in TOLD or policy != ConfirmationRequest.Policy.APPROVERS:
        return
    transaction.on_commit(lambda: dispatch(notify_requester, str(request_id)))
