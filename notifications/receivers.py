"""Receivers on approvals' signals: start the notifications once the change has committed (a
rolled-back decision tells no one; no network call inside a transaction)."""
from __future__ import annotations

from django.db import transaction

from approvals.models import ConfirmationRequest
from notifications.dispatch import dispatch
from notifications.followups import STOPPED
from notifications.tasks import notify_approvers, notify_requester, notify_retraction, notify_revised

Status = ConfirmationRequest.Status
# Endings the requester is told about (notify_requester decides which of them concern it).
TOLD = (Status.CONFIRMED, Status.CANCELLED, Status.EXPIRED)


def on_approvers_needed(sender, *, request_id, tenant_id, replaces=(), again=False, **kwargs) -> None:
    """`approvers_needed`: after commit, notify the people who may decide the request (and, in the
    same email, those asked about the requests it `replaces` that these no longer need them)."""
    older = [str(i) for i in replaces]
    transaction.on_commit(lambda: dispatch(notify_approvers, str(request_id), older, bool(again)))


def on_settled(sender, *, request_id, run_id, status, policy=None, **kwargs) -> None:
    """`confirmation_settled`: after commit, tell the requester of an approver-gated request (a
    requester-confirmed one was decided by the requester: nothing to tell, no query)."""
    if status not in TOLD or policy != ConfirmationRequest.Policy.APPROVERS:
        return
    transaction.on_commit(lambda: dispatch(notify_requester, str(request_id)))
    if status == Status.CANCELLED:  # a stopped tool ends its requests without `request_ended`
        transaction.on_commit(lambda: dispatch(notify_retraction, str(request_id), STOPPED, None))


def on_revised(sender, *, request_id, revision, **kwargs) -> None:
    """`request_revised`: after commit, ask the approvers who must decide the new revision."""
    transaction.on_commit(lambda: dispatch(notify_revised, str(request_id), int(revision)))


def on_ended(sender, *, request_id, ending, replaced_by=None, **kwargs) -> None:
    """`request_ended`: after commit, tell the approvers who were asked that it no longer needs them."""
    newer = str(replaced_by) if replaced_by else None
    transaction.on_commit(lambda: dispatch(notify_retraction, str(request_id), str(ending), newer))
