"""The approver's decisions: approve and reject an approver-gated request, and the lock-and-check
every approver decision starts with (approvals.amendments' edit and respond use it too).

`confirmation_approve` and `confirmation_reject` are top-level services: each runs one durable
transaction with its audit row, so they must not be called inside a caller's transaction; a refusal
is audited after the rollback (`guard.guarded`). `request_for_approver` must run inside the
decision's transaction (it locks the request).
"""
from __future__ import annotations

import uuid

from django.db import transaction

from core import clock, correlation
from core.redaction.text import mask_text
from approvals import independence, locks, rules, signals, tracing
from approvals.errors import (
    ApprovalForbidden,
    ApproverNotIndependent,
    ArgumentsChanged,
    ConfirmationAlreadyDecided,
    ConfirmationNotFound,
    ReasonRequired,
)
from approvals.guard import guarded, require_open
from approvals.independence import is_service_account
from approvals.models import Approval, ConfirmationRequest
from audit import events

Status = ConfirmationRequest.Status

OWN_CALL = "a requester never approves their own call"


def refuse_service_account(actor) -> None:
    """Raise ApprovalForbidden when `actor` is a service account: a program's account never
    approves, rejects, edits or counts toward a quorum, whatever it was granted (docs/roles.md,
    "Service accounts"; the grant itself is refused by the control-plane rules)."""
    if is_service_account(actor):
        raise ApprovalForbidden("a service account never decides an approval or counts toward a quorum "
                                "/ 服务账号不能审批")


def require_independent(*, actor, request: ConfirmationRequest) -> None:
    """Refuse a decision of `actor` on `request` that would not count toward its quorum: a decision
    counts only from an approver independent of the request (approvals.independence). Raises
    ApproverNotIndependent saying why."""
    standing = independence.assess(user=actor, request=request)
    if not standing.eligible:
        raise ApproverNotIndependent(f"your decision would not count toward this request: {standing.reason}")


def request_for_approver(*, actor, request_id: uuid.UUID, own_call: str = OWN_CALL,
                         related: tuple[str, ...] = ("tool",), open_now: bool = True) -> ConfirmationRequest:
    """Lock `request_id` for a decision by `actor` and check the approver rules: same tenant
    (ConfirmationNotFound, 404), approver-gated, not the requester (ApprovalForbidden with
    `own_call`, 403), not a service account, `approve_tool` on the tool (403), independent of the
    request (ApproverNotIndependent, 403); with `open_now`, still open (ConfirmationExpired 410,
    ConfirmationAlreadyDecided 409). Sets the run id of the log context. `related`: rows read with
    the request. Inside the decision's transaction. Returns the locked request."""
    if actor.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation request")
    request = locks.request_for_approver(tenant_id=actor.tenant_id, request_id=request_id, related=related)
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    if request.policy != ConfirmationRequest.Policy.APPROVERS:
        raise ApprovalForbidden("this call is confirmed by its requester, not by approvers")
    if request.user_id == actor.pk:
        raise ApprovalForbidden(own_call)
    refuse_service_account(actor)
    if not actor.has_perm("tools.approve_tool", request.tool):
        raise ApprovalForbidden("you do not hold approve_tool on this tool")
    require_independent(actor=actor, request=request)
    correlation.set_run_id(request.run_id)
    if open_now:
        require_open(request, now=clock.now())
    return request


@transaction.atomic(durable=True)
def _decide(*, actor, request_id: uuid.UUID, approve: bool, comment: str, arguments_hash: str = "") -> ConfirmationRequest:
    comment = mask_text(comment)  # stored, shown to the requester and the model, audited
    request = request_for_approver(actor=actor, request_id=request_id, open_now=False)
    now = clock.now()
    # One decision per approver and revision: an edit restarts the quorum. Checked before whether
    # the request is still open: a second click after the first one ended it (a rejection, the
    # approval that reached the quorum) is told that its first decision stands.
    if Approval.objects.filter(request=request, approver=actor, revision=request.revision).exists():
        raise ConfirmationAlreadyDecided("you already decided this request")
    require_open(request, now=now)
    # An approval is of the arguments the approver saw: when they were edited meanwhile (or the
    # request was ever edited and the approver does not say which arguments), it is refused.
    if approve and (arguments_hash or request.revision) and arguments_hash != request.arguments_hash:
        raise ArgumentsChanged("the arguments were edited; read them again and approve the edited arguments "
                               "(send their arguments_hash)")
    Approval.objects.create(
        request=request, approver=actor, decision=Approval.Decision.APPROVE if approve else Approval.Decision.REJECT,
        comment=comment[:2000], revision=request.revision, arguments_hash=request.arguments_hash,
    )
    if not approve:
        request.status = Status.CANCELLED
        request.decided_at = now
        request.decided_by = actor
        request.decision_reason = comment[:500]
    elif rules.decisions_confirm(request.approvals.filter(revision=request.revision).select_related("approver"),
                                 quorum=request.quorum, revision=request.revision):
        request.status = Status.CONFIRMED
        request.confirmed_at = request.decided_at = now
        request.decided_by = actor
    request.save(update_fields=["status", "confirmed_at", "decided_at", "decided_by", "decision_reason"])
    (events.request_approved if approve else events.request_rejected)(request, actor_id=actor.pk,
                                                                      message=comment[:200])
    if request.status != Status.PENDING:
        signals.send_settled(request)
        signals.send_ended(request, ending=signals.DECIDED, actor_id=actor.pk)
    return request


@tracing.decision("approve")
def confirmation_approve(*, request_id: uuid.UUID, approver, comment: str = "",
                         arguments_hash: str = "") -> ConfirmationRequest:
    """Record one approver's APPROVE; at quorum the request becomes CONFIRMED and the run resumes.

    Rules: same tenant, `approve_tool` on the tool, not the requester, one decision per approver
    and revision, the quorum of distinct independent approvers, an edit never confirmed by its
    editor alone (`rules.quorum_reached`). arguments_hash: the binding the approver saw; required
    once the request was edited. Raises ConfirmationNotFound (404), ApprovalForbidden (403),
    ApproverNotIndependent (403), ConfirmationExpired (410), ConfirmationAlreadyDecided (409),
    ArgumentsChanged (409: the arguments were edited since the approver read them).
    """
    return guarded(_decide, actor=approver, request_id=request_id, approve=True, comment=comment,
                   arguments_hash=arguments_hash or "")


@tracing.decision("reject")
def confirmation_reject(*, request_id: uuid.UUID, approver, reason: str) -> ConfirmationRequest:
    """Reject the request (CANCELLED) with a required reason; the model is told it was rejected.

    Raises ReasonRequired for a blank reason, otherwise as `confirmation_approve`.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReasonRequired("a rejection needs a reason")
    return guarded(_decide, actor=approver, request_id=request_id, approve=False, comment=reason.strip())
