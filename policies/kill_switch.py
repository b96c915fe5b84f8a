"""The kill switch: one audited action stops a tool, another releases it (docs/policy.md).

A **stop** (policies.models.KillSwitch) holds for one tenant (a tenant administrator's, for their
tenant) or for every tenant (a platform operator's). While it is in force:

- every new call of the tool is denied with TOOL_STOPPED and the stop's reason, checked first in
  the gate of every call (tools.gate.gate_call, through `active_stop`: one indexed query);
- a decision of the tool is refused when consumed (the same gate runs at consume time), so a
  request that escaped the sweep below (proposed while the stop committed) never runs;
- when it is engaged, every request of the tool still to run in its scope (PENDING or CONFIRMED)
  is CANCELLED with outcome TOOL_STOPPED and the reason, audited and settled, so its run answers
  the model in words and the requester of an approver-gated request is told.

A call already executing when the stop commits finishes. Releasing is a separate action with who
and why; a tenant administrator cannot release a platform operator's stop (of every tenant, or of theirs). Both
actions write one CONTROL_CHANGE audit row per tenant they concern.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role
from approvals import locks, signals
from approvals.models import ConfirmationRequest
from audit import events
from core import clock
from core.redaction.text import mask_text
from core.errors import ConflictError, InvalidInputError, NotFoundError, PermissionDeniedError
from core.sql.select import select_rows
from policies.models import KillSwitch

TOOL_STOPPED = "TOOL_STOPPED"
REASON_MAX = 500
KIND = "kill_switch"


class ToolAlreadyStopped(ConflictError):
    """A stop of this tool is already in force in the scope asked for (or in every tenant). HTTP 409."""

    code = "TOOL_ALREADY_STOPPED"


class ToolNotStopped(ConflictError):
    """No stop of this tool is in force in the scope asked for, or this stop was already released. HTTP 409."""

    code = "TOOL_NOT_STOPPED"


@dataclass(frozen=True)
class ActiveStop:
    """A stop in force as the gate reads it: its id, tool, tenant (None: every tenant) and reason."""

    id: uuid.UUID
    tool_name: str
    tenant_id: int | None
    reason: str

    @property
    def message(self) -> str:
        """What the model and the requester read (English / Chinese)."""
        return stopped_message(self.tool_name, self.reason)


@dataclass(frozen=True)
class Engaged:
    """An engaged stop and the ids of the requests it cancelled."""

    stop: KillSwitch
    cancelled: list[uuid.UUID]


def stopped_message(tool_name: str, reason: str) -> str:
    """The words for a call refused or a request cancelled by a stop of `tool_name` with `reason`."""
    return (f"the tool {tool_name} has been stopped by an administrator: {reason}. Nothing was done; do not "
            f"retry it until it is released / 工具 {tool_name} 已被管理员停用：{reason}。未执行任何操作，"
            f"在恢复前请勿重试")


def active_stop(tenant_id: int | None, tool_name: str) -> ActiveStop | None:
    """The stop in force for calls of `tool_name` in `tenant_id` (its own, or one of every
    tenant), or None. One query on the partial unique index of active stops (a prebuilt
    statement: every call's gate reads it)."""
    any_of: dict[str, Any] = {"tenant__isnull": True}
    if tenant_id is not None:
        any_of["tenant"] = tenant_id
    rows = select_rows(KillSwitch, {"tool_name": tool_name, "released_at__isnull": True}, any_of=any_of,
                       only=("tenant", "tool_name", "reason"), limit=1)
    if not rows:
        return None
    row = rows[0]
    return ActiveStop(id=row.pk, tool_name=row.tool_name, tenant_id=row.tenant_id, reason=row.reason)


def _reason(text: Any, field: str = "reason") -> str:
    """`text` stripped and masked (core.redaction.text); InvalidInputError when it is missing, blank or longer than REASON_MAX."""
    reason = text.strip() if isinstance(text, str) else ""
    if not reason:
        raise InvalidInputError(f"{field} is required: say why / 请说明原因")
    if len(reason) > REASON_MAX or "\x00" in reason:
        raise InvalidInputError(f"{field} must be at most {REASON_MAX} characters of text")
    # The model, the requesters and the audit trail read it: a token or card pasted in is masked.
    return mask_text(reason)[:REASON_MAX]


def _scope_of(actor: Any, tenant_id: int | None) -> int | None:
    """The tenant a stop by `actor` asked for `tenant_id` concerns (None: every tenant). A platform
    operator may name any tenant or none; a tenant administrator acts for their own tenant only
    (another tenant answers NotFoundError, as if it did not exist). Anyone else:
    PermissionDeniedError."""
    role = admin_role(actor)
    if role == PLATFORM_OPERATOR:
        return tenant_id
    if role == TENANT_ADMINISTRATOR:
        if tenant_id is not None and tenant_id != actor.tenant_id:
            raise NotFoundError("no such tenant")
        return actor.tenant_id
    raise PermissionDeniedError("only a tenant administrator or a platform operator may stop or release a tool")


def _tenants(tenant_id: int | None) -> list[int]:
    return [tenant_id] if tenant_id is not None else list(Tenant.objects.order_by("pk").values_list("pk", flat=True))


def _audit(stop: KillSwitch, *, verb: str, actor: Any, old: dict | None, new: dict, message: str) -> None:
    details = {"object": {"type": KIND, "id": str(stop.pk)}, "old": old, "new": new,
               "actor_role": admin_role(actor), "scope": "tenant" if stop.tenant_id is not None else "platform"}
    for tenant_id in _tenants(stop.tenant_id):
        events.control_change_recorded(tenant_id=tenant_id, status=verb, actor_id=getattr(actor, "pk", None),
                                       tool_name=stop.tool_name, masked_arguments=details, message=message)


def visible_stops(actor: Any) -> QuerySet[KillSwitch]:
    """The stops `actor` may see: a platform operator every one; a tenant administrator their
    tenant's and those of every tenant (they apply to it); anyone else none. Newest first."""
    role = admin_role(actor)
    qs = KillSwitch.objects.select_related("tenant", "engaged_by", "released_by").order_by("-engaged_at", "pk")
    if role == PLATFORM_OPERATOR:
        return qs
    if role == TENANT_ADMINISTRATOR:
        return qs.filter(Q(tenant_id=actor.tenant_id) | Q(tenant__isnull=True))
    return qs.none()


@transaction.atomic
def kill_switch_engage(*, tool_name: str, actor: Any, reason: str, tenant_id: int | None = None) -> Engaged:
    """Stop `tool_name` for `tenant_id` (a platform operator: None = every tenant; a tenant
    administrator: always their own tenant) because of `reason` (required, at most 500
    characters). Whether the tool exists is the caller's to check (the tool registry is above
    this layer).

    In one transaction: the stop row, a CONTROL_CHANGE row (CREATED) per tenant concerned, and
    every request of the tool still to run in scope CANCELLED (outcome TOOL_STOPPED, the reason,
    `decided_by` the actor), audited and settled so the runs tell the model. Returns Engaged.

    Raises InvalidInputError (reason), PermissionDeniedError (not an administrator),
    NotFoundError (a tenant administrator naming another tenant), ToolAlreadyStopped (a stop of
    the tool is in force in that scope or in every tenant).
    """
    reason = _reason(reason)
    scope = _scope_of(actor, tenant_id)
    in_force = KillSwitch.objects.filter(tool_name=tool_name, released_at__isnull=True).filter(
        Q(tenant__isnull=True) | Q(tenant_id=scope) if scope is not None else Q(tenant__isnull=True)).first()
    if in_force is not None:
        raise ToolAlreadyStopped(_already(in_force))
    stop = KillSwitch(tenant_id=scope, tool_name=tool_name, reason=reason, engaged_by=actor, engaged_at=clock.now())
    try:
        with transaction.atomic():
            stop.save(force_insert=True)
    except IntegrityError:  # engaged concurrently: the unique constraint of active stops decided
        raise ToolAlreadyStopped(f"{tool_name} was stopped by someone else at the same time") from None
    _audit(stop, verb="CREATED", actor=actor, old=None,
           new={"tool": tool_name, "state": "stopped", "reason": reason},
           message=f"{KIND} {tool_name} engaged ({_where(stop)}): {reason}")
    where: dict[str, Any] = {"tool_name": tool_name}
    if scope is not None:
        where["tenant_id"] = scope
    return Engaged(stop=stop, cancelled=_cancel_requests(where, actor=actor, reason=reason))


def _already(stop: KillSwitch) -> str:
    who = stop.engaged_by.get_username() if stop.engaged_by else "the platform"
    return (f"{stop.tool_name} is already stopped ({_where(stop)}) since {stop.engaged_at:%Y-%m-%d %H:%M} UTC by "
            f"{who}: {stop.reason}")


def _where(stop: KillSwitch) -> str:
    return "in every tenant" if stop.tenant_id is None else "in this tenant"


def _cancel_requests(where: dict[str, Any], *, actor: Any, reason: str) -> list[uuid.UUID]:
    """Cancel the requests still to run matching `where`, locked in primary-key order, each with a
    conditional UPDATE (one decided meanwhile is left as it is), its CANCELLED audit row (status
    TOOL_STOPPED) and the settle signal (its run resumes after commit and tells the model)."""
    cancelled = []
    actor_id = getattr(actor, "pk", None)
    for request in locks.pending_or_confirmed(where):
        changed = ConfirmationRequest.objects.filter(pk=request.pk).pending_or_confirmed().update(
            status=ConfirmationRequest.Status.CANCELLED, decided_at=clock.now(), decided_by=actor_id,
            decision_reason=reason[:500], outcome_code=TOOL_STOPPED)
        if changed != 1:
            continue
        request.status = ConfirmationRequest.Status.CANCELLED
        request.outcome_code = TOOL_STOPPED
        events.request_cancelled(request, actor_id=actor_id, status=TOOL_STOPPED,
                                 message=f"the tool {request.tool_name} was stopped: {reason}")
        signals.send_settled(request)
        cancelled.append(request.pk)
    return cancelled


@transaction.atomic
def kill_switch_release(*, stop_id: uuid.UUID, actor: Any, reason: str) -> KillSwitch:
    """Release the stop `stop_id` because of `reason` (required, at most 500 characters): new
    calls of the tool are gated as before (requests it cancelled stay cancelled). Writes a
    CONTROL_CHANGE row (CHANGED) per tenant concerned. Returns the released row.

    Raises InvalidInputError (reason), PermissionDeniedError (not an administrator, or a tenant
    administrator releasing a stop of every tenant or any stop a platform operator engaged), NotFoundError (unknown, or another tenant's
    stop), ToolNotStopped (already released).
    """
    reason = _reason(reason)
    _scope_of(actor, None)
    stop = visible_stops(actor).select_for_update(of=("self",)).filter(pk=stop_id).first()
    if stop is None:
        raise NotFoundError("no such kill switch")
    return _release(stop, actor=actor, reason=reason)


@transaction.atomic
def kill_switch_release_tool(*, tool_name: str, actor: Any, reason: str, tenant_id: int | None = None) -> KillSwitch:
    """Release the stop of `tool_name` in force in the actor's scope (as kill_switch_engage reads
    `tenant_id`). Returns the released row. Raises as kill_switch_release; ToolNotStopped when no
    stop is in force in that scope; PermissionDeniedError when a tenant administrator's tool is
    stopped by a platform operator (of every tenant, or of this one)."""
    reason = _reason(reason)
    scope = _scope_of(actor, tenant_id)
    stop = (KillSwitch.objects.select_for_update(of=("self",)).select_related("tenant")
            .filter(tool_name=tool_name, released_at__isnull=True, tenant_id=scope).first()
            if scope is not None else
            KillSwitch.objects.select_for_update(of=("self",)).filter(
                tool_name=tool_name, released_at__isnull=True, tenant__isnull=True).first())
    if stop is None:
        if scope is not None and active_stop(scope, tool_name) is not None:
            raise PermissionDeniedError(f"{tool_name} is stopped in every tenant by a platform operator; only a "
                                        f"platform operator can release it")
        raise ToolNotStopped(f"{tool_name} is not stopped {'in this tenant' if scope is not None else 'everywhere'}")
    return _release(stop, actor=actor, reason=reason)


def _release(stop: KillSwitch, *, actor: Any, reason: str) -> KillSwitch:
    if stop.tenant_id is None and admin_role(actor) != PLATFORM_OPERATOR:
        raise PermissionDeniedError("a stop of every tenant is a platform operator's; only a platform operator can "
                                    "release it")
    if admin_role(actor) != PLATFORM_OPERATOR and getattr(stop.engaged_by, "is_superuser", False):
        # A platform operator's stop of one tenant is theirs too: the tenant's administrator, whose
        # tenant it may have been stopped against, cannot lift it.
        raise PermissionDeniedError("a platform operator stopped this tool; only a platform operator can release it "
                                    "/ 此停用由平台运维设置，仅平台运维可解除")
    if stop.released_at is not None:
        raise ToolNotStopped(f"this stop of {stop.tool_name} was already released")
    stop.released_at, stop.released_by, stop.release_reason = clock.now(), actor, reason
    stop.save(update_fields=["released_at", "released_by", "release_reason"])
    _audit(stop, verb="CHANGED", actor=actor, old={"state": "stopped"}, new={"state": "released", "reason": reason},
           message=f"{KIND} {stop.tool_name} released ({_where(stop)}): {reason}")
    return stop
