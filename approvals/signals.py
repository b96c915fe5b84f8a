"""Signals the approvals app emits. Higher apps (the agent runtime, notifications) listen; we never
import them.

`confirmation_settled(sender, request_id, run_id, status, policy)` is sent inside the transaction that
settled a request (CONFIRMED, CANCELLED or EXPIRED); receivers defer their work with
`transaction.on_commit`, so a rolled-back decision enqueues nothing.

`approvers_needed(sender, request_id, tenant_id)` is sent inside the transaction that made an
approver-gated request PENDING (created, or sent back to waiting under a stricter policy);
receivers (notifications) defer their work with `transaction.on_commit` as well.
"""
from django.dispatch import Signal

from approvals.models import ConfirmationRequest

confirmation_settled = Signal()
approvers_needed = Signal()


def send_settled(request: ConfirmationRequest) -> None:
    """Send `confirmation_settled` for `request` (a ConfirmationRequest just ended or confirmed),
    inside the transaction that settled it."""
    confirmation_settled.send(
        sender=ConfirmationRequest, request_id=request.id, run_id=request.run_id, status=request.status,
        policy=request.policy,
    )


def send_approvers_needed(request: ConfirmationRequest) -> None:
    """Send `approvers_needed` when `request` is approver-gated and PENDING (created, or sent back
    to waiting), inside that transaction; otherwise nothing."""
    if (request.policy == ConfirmationRequest.Policy.APPROVERS
            and request.status == ConfirmationRequest.Status.PENDING):
        approvers_needed.send(sender=ConfirmationRequest, request_id=request.id, tenant_id=request.tenant_id)
