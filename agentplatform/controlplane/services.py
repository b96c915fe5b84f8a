"""Writes of dual control: propose, approve (and apply), reject and expire pending control changes
(docs/roles.md, "Trust model").

Each top-level service is one durable transaction that also writes its CONTROL_CHANGE audit row
(through `receivers.changes.control_change`, the writer of every control-plane row); a refusal is
audited after its transaction rolled back. Who may decide is `deciders`; how a change is
re-validated and applied is `applying`. The change itself is applied through the ordinary models
(guardian's `assign_perm`, the m2m manager, `save()`), so the control-plane audit receivers and
the guards see it like any other write; `guards.gate.applying(change)` lets it through.
"""
from __future__ import annotations

import datetime
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction

from core import clock
from agentplatform.controlplane.applying import apply_change, stale
from agentplatform.controlplane.deciders import check_decider, may_administer
from agentplatform.controlplane.errors import (
    ControlChangeAlreadyDecided,
    ControlChangeExpired,
    ControlChangeForbidden,
    ControlChangeNotFound,
    ControlChangeStale,
)
from agentplatform.controlplane.guards.gate import Gated, applying
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.receivers.changes import control_change
from core.errors import DomainError
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import Tenant, User

Kind = PendingControlChange.Kind
Status = PendingControlChange.Status


def ttl() -> datetime.timedelta:
    """How long a change waits for its second person (CONTROL_CHANGE_TTL_HOURS, default 72 h)."""
    return datetime.timedelta(hours=getattr(settings, "CONTROL_CHANGE_TTL_HOURS", 72))


def _tenants(change: PendingControlChange) -> list[int]:
    if change.tenant_id is not None:
        return [change.tenant_id]
    return list(Tenant.objects.order_by("pk").values_list("pk", flat=True))


def _audit(change: PendingControlChange, *, verb: str, old: dict | None = None, new: dict | None = None) -> None:
    """One CONTROL_CHANGE row per tenant concerned, object "control_change", status = verb
    (PROPOSED, APPLIED, REJECTED, EXPIRED, REFUSED)."""
    details_old = {"kind": change.kind, "state": change.old_state, **(old or {})}
    details_new = {"kind": change.kind, "state": change.new_state, "proposed_by": change.proposed_by.username,
                   "decided_by": change.decided_by.username if change.decided_by_id else None,
                   "reason": change.decision_reason, "summary": change.summary, **(new or {})}
    control_change(kind="control_change", verb=verb, ident=str(change.pk), tenants=_tenants(change),
                   old=details_old, new=details_new, tool_name=change.new_state.get("tool", "") or "")


@transaction.atomic(durable=True)
def control_change_propose(*, proposer: User, gated: Gated) -> PendingControlChange:
    """Record `gated` (what a person attempted; guards.gate.Gated) as a PENDING change proposed by
    `proposer`, expiring after CONTROL_CHANGE_TTL_HOURS; audited PROPOSED. Nothing is applied.

    An identical change already pending is returned as it is (one pending change per target), also
    when it was proposed at the same moment by another request.
    Raises ControlChangeForbidden when `proposer` administers neither the tenant concerned nor
    the platform (a platform-wide change is an operator's).
    """
    if not may_administer(proposer, gated.tenant_id):
        raise ControlChangeForbidden("only an administrator of the tenant concerned (or a platform operator) "
                                     "may propose this change")
    existing = PendingControlChange.objects.filter(target_key=gated.key, status=Status.PENDING,
                                                   expires_at__gt=clock.now()).first()
    if existing is not None:
        return existing
    control_changes_expire_inline(target_key=gated.key)
    now = clock.now()
    try:
        with transaction.atomic():  # a savepoint: the same proposal made at once by another request
            change = PendingControlChange.objects.create(
                tenant_id=gated.tenant_id, kind=gated.kind, target=gated.target, target_key=gated.key,
                summary=gated.summary[:500], old_state=gated.old, new_state=gated.new, proposed_by=proposer,
                proposed_at=now, expires_at=now + ttl())
    except IntegrityError:
        existing = PendingControlChange.objects.filter(target_key=gated.key, status=Status.PENDING).first()
        if existing is None:
            raise
        return existing  # the other request's proposal is the one pending
    with acting_as(proposer):
        _audit(change, verb="PROPOSED")
    return change


def control_changes_propose(*, proposer: User, gated: list[Gated]) -> list[PendingControlChange]:
    """`control_change_propose` for each of `gated` (each its own transaction). Returns the changes."""
    return [control_change_propose(proposer=proposer, gated=g) for g in gated]


def _lock(change_id: uuid.UUID | str) -> PendingControlChange:
    change = PendingControlChange.objects.select_for_update(of=("self",)).select_related(
        "proposed_by").filter(pk=change_id).first()
    if change is None:
        raise ControlChangeNotFound("unknown control change")
    return change


def _require_open(change: PendingControlChange) -> None:
    if change.status != Status.PENDING:
        raise ControlChangeAlreadyDecided(f"this change is already {change.status}")
    if change.expires_at <= clock.now():
        raise ControlChangeExpired("this change expired before anyone decided it")


@transaction.atomic(durable=True)
def _approve(*, change_id, approver: User, comment: str) -> PendingControlChange:
    change = _lock(change_id)
    check_decider(change, approver, approving=True)
    _require_open(change)
    change.status = Status.APPLIED
    change.decided_by = approver
    change.decided_at = clock.now()
    change.decision_reason = comment[:500]
    change.save(update_fields=["status", "decided_by", "decided_at", "decision_reason"])
    with acting_as(approver), applying(change):
        try:
            apply_change(change)
        except DjangoValidationError as error:
            raise stale("; ".join(error.messages)) from error
        _audit(change, verb="APPLIED")
    return change


@transaction.atomic(durable=True)
def _end(*, change_id, decider: User | None, status: str, reason: str) -> PendingControlChange | None:
    """End a PENDING change as REJECTED / REFUSED / EXPIRED, audited. None when no longer pending."""
    change = _lock(change_id)
    if change.status != Status.PENDING:
        return None
    change.status = status
    change.decided_by = decider
    change.decided_at = clock.now()
    change.decision_reason = reason[:500]
    change.save(update_fields=["status", "decided_by", "decided_at", "decision_reason"])
    with acting_as(decider):
        _audit(change, verb=status)
    return change


def _audit_refusal(change_id, actor: User, error: DomainError) -> None:
    """A refused decision leaves a row after its rollback (a denial outlives the work it denied), in the
    tenant concerned."""
    change = PendingControlChange.objects.filter(pk=change_id).select_related("proposed_by").first()
    if change is None or (actor.tenant_id is not None and change.tenant_id != actor.tenant_id):
        return  # another tenant's (or a platform-wide) change: nothing of it crosses into a trail
    with acting_as(actor):
        control_change(kind="control_change", verb="DENIED", ident=str(change.pk), tenants=_tenants(change),
                       old=None, new={"code": error.code, "message": error.message, "summary": change.summary})


def control_change_approve(*, change_id: uuid.UUID | str, approver: User, comment: str = "") -> PendingControlChange:
    """A second person approves a pending change: re-validated against the current state and
    applied in the same transaction (its standing recorded with both people), audited APPLIED.

    approver: a platform operator, or an administrator of the change's tenant; never its proposer,
    never a user the change would empower. Two approvers at once: the row lock lets one apply it,
    the other gets ControlChangeAlreadyDecided. Raises ControlChangeNotFound (unknown, another
    tenant's), ControlChangeForbidden, ControlChangeAlreadyDecided, ControlChangeExpired (the change
    is then marked EXPIRED), ControlChangeStale (no longer valid: marked REFUSED, nothing applied).
    Every refusal is audited (status DENIED) after the rollback.
    """
    try:
        return _approve(change_id=change_id, approver=approver, comment=comment)
    except DomainError as error:
        if isinstance(error, ControlChangeExpired):
            control_changes_expire()
        elif isinstance(error, ControlChangeStale):
            _end(change_id=change_id, decider=approver, status=Status.REFUSED, reason=error.message)
        _audit_refusal(change_id, approver, error)
        raise


def control_change_reject(*, change_id: uuid.UUID | str, decider: User, reason: str = "") -> PendingControlChange:
    """Reject a pending change (its proposer may withdraw it too); nothing is applied; audited
    REJECTED. Raises ControlChangeNotFound (unknown, another tenant's, not an administrator),
    ControlChangeAlreadyDecided; a refusal is audited (DENIED)."""
    try:
        change = PendingControlChange.objects.filter(pk=change_id).first()
        if change is None:
            raise ControlChangeNotFound("unknown control change")
        check_decider(change, decider, approving=False)
        ended = _end(change_id=change_id, decider=decider, status=Status.REJECTED, reason=reason or "rejected")
        if ended is None:
            raise ControlChangeAlreadyDecided(
                f"this change is already {PendingControlChange.objects.get(pk=change_id).status}")
        return ended
    except DomainError as error:
        _audit_refusal(change_id, decider, error)
        raise


def control_changes_expire_inline(*, target_key: str | None = None) -> int:
    """Expire due changes inside the caller's transaction (see control_changes_expire)."""
    due = PendingControlChange.objects.filter(status=Status.PENDING, expires_at__lte=clock.now())
    if target_key is not None:
        due = due.filter(target_key=target_key)
    count = 0
    for change in due.select_related("proposed_by").order_by("expires_at")[:500]:
        if PendingControlChange.objects.filter(pk=change.pk, status=Status.PENDING).update(
                status=Status.EXPIRED, decided_at=clock.now(), decision_reason="nobody decided before the deadline") != 1:
            continue
        change.status = Status.EXPIRED
        change.decision_reason = "nobody decided before the deadline"
        _audit(change, verb="EXPIRED")
        count += 1
    return count


@transaction.atomic
def control_changes_expire() -> int:
    """Mark PENDING changes past `expires_at` EXPIRED, each audited; nothing applied. A change
    expired concurrently by another sweeper is counted once (compare-and-set). Returns how many."""
    try:
        return control_changes_expire_inline()
    except IntegrityError:  # pragma: no cover - a concurrent proposer took the slot; next sweep
        return 0
