"""Signals the approvals app emits. Higher apps (the agent runtime, notifications) listen; we never
import them. Every signal is sent inside the transaction that made the change; receivers defer
their work with `transaction.on_commit`, so a rolled-back decision tells and enqueues nothing.

`confirmation_settled(sender, request_id, run_id, status, policy)`: a request was settled
(CONFIRMED, CANCELLED, EXPIRED, SUPERSEDED, WITHDRAWN, RESPONDED); the runtime resumes its run.

`approvers_needed(sender, request_id, tenant_id, replaces, again)`: an approver-gated request
became PENDING: created (`replaces`: the ids of the older requests it superseded, in the same
transaction) or sent back to waiting under a stricter policy (`again` True).

`request_revised(sender, request_id, tenant_id, revision, editor_id)`: an approver edited the
arguments of an approver-gated request; decisions on earlier revisions stopped counting, so the
other approvers must decide the new revision.

`request_ended(sender, request_id, tenant_id, ending, actor_id, replaced_by)`: an approver-gated
request stopped waiting for approvers. `ending` is one of ENDINGS: DECIDED (approved at quorum,
rejected, or answered with guidance, by `actor_id`), WITHDRAWN (by the requester), EXPIRED, or
SUPERSEDED (by the newer request `replaced_by`).
"""
from __future__ import annotations

import uuid

from django.dispatch import Signal

from approvals import tracing
from approvals.models import ConfirmationRequest

confirmation_settled = Signal()
approvers_needed = Signal()
request_revised = Signal()
request_ended = Signal()

DECIDED = "DECIDED"
WITHDRAWN = "WITHDRAWN"
EXPIRED = "EXPIRED"
SUPERSEDED = "SUPERSEDED"
ENDINGS = (DECIDED, WITHDRAWN, EXPIRED, SUPERSEDED)


def _approver_gated(request: ConfirmationRequest) -> bool:
    return request.policy == ConfirmationRequest.Policy.APPROVERS


def send_settled(request: ConfirmationRequest) -> None:
    """Send `confirmation_settled` for `request` (a ConfirmationRequest just ended or confirmed),
    inside the transaction that settled it, and record its wait (approvals.tracing)."""
    tracing.settled(request)
    confirmation_settled.send(
        sender=ConfirmationRequest, request_id=request.id, run_id=request.run_id, status=request.status,
        policy=request.policy,
    )


def send_approvers_needed(request: ConfirmationRequest, *, replaces: list[uuid.UUID] | tuple = (),
                          again: bool = False) -> None:
    """Send `approvers_needed` when `request` is approver-gated and PENDING (created, or sent back
    to waiting: `again`), inside that transaction; otherwise nothing. replaces: ids of the older
    requests it superseded."""
    if _approver_gated(request) and request.status == ConfirmationRequest.Status.PENDING:
        approvers_needed.send(sender=ConfirmationRequest, request_id=request.id, tenant_id=request.tenant_id,
                              replaces=list(replaces), again=again)


def send_revised(request: ConfirmationRequest, *, editor_id: int) -> None:
    """Send `request_revised` for the approver-gated `request` just edited by `editor_id` (its
    `revision` is the new one), inside the edit's transaction."""
    if _approver_gated(request):
        request_revised.send(sender=ConfirmationRequest, request_id=request.id, tenant_id=request.tenant_id,
                             revision=request.revision, editor_id=editor_id)


def send_ended(request: ConfirmationRequest, *, ending: str, actor_id: int | None = None,
               replaced_by: uuid.UUID | None = None) -> None:
    """Send `request_ended` when the approver-gated `request` stopped waiting for approvers, inside
    the transaction that ended it; nothing for a requester-confirmed one or while it still waits.
    ending: one of ENDINGS (ValueError otherwise). actor_id: who ended it (None: the platform).
    replaced_by: the newer request (SUPERSEDED only)."""
    if ending not in ENDINGS:
        raise ValueError(f"unknown ending {ending!r}")
    if not _approver_gated(request) or request.status == ConfirmationRequest.Status.PENDING:
        return
    request_ended.send(sender=ConfirmationRequest, request_id=request.id, tenant_id=request.tenant_id,
                       ending=ending, actor_id=actor_id, replaced_by=replaced_by)
