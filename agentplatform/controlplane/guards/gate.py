"""What every guard shares: the decision to let a guarded change through or refuse it (`gate`),
the mark of an approved change being applied (`applying`), the description of a refused change
(`Gated`, what a proposal holds), and the record of where a piece of standing came from
(`record_standing`). Guards run inside the transaction of the change they see.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

from core import clock
from agentplatform.controlplane.errors import ControlChangeRequired
from agentplatform.controlplane.models import StandingSource
from agentplatform.tenancy.actor import current_actor

_applying: ContextVar[Any] = ContextVar("control_change_applying", default=None)


@contextlib.contextmanager
def applying(change: Any) -> Iterator[None]:
    """Mark the writes inside the block as the application of the approved `change` (a
    PendingControlChange): the guards let them through and record their standing with the
    change's proposer and approver. Only agentplatform.controlplane.services.control_change_approve
    uses it."""
    token = _applying.set(change)
    try:
        yield
    finally:
        _applying.reset(token)


@dataclass
class Gated:
    """One guarded change a person attempted: what a PendingControlChange would hold.

    kind: PendingControlChange.Kind value. tenant_id: the tenant concerned (None: platform-wide).
    target: ids to apply. old / new: what people are shown. summary: one line.
    """

    kind: str
    tenant_id: int | None
    target: dict[str, Any]
    old: dict[str, Any]
    new: dict[str, Any]
    summary: str
    key: str = field(default="")

    def __post_init__(self) -> None:
        if not self.key:
            ids = ":".join(f"{k}={self.target[k]}" for k in sorted(self.target) if k != "fields")
            self.key = f"{self.kind}:{ids}"[:200]


def gate(gated: list[Gated]) -> None:
    """Let `gated` through when an approved change is being applied or no person acts; else refuse."""
    if not gated or _applying.get() is not None or current_actor() is None:
        return
    raise ControlChangeRequired(gated)


def applying_change() -> Any:
    """The approved change being applied in this context (a PendingControlChange), or None."""
    return _applying.get()


def stored_row(sender, instance) -> Any:
    """The stored version of `instance` (a row being saved), or None for a new row."""
    if instance._state.adding or instance.pk is None:
        return None
    return sender._default_manager.filter(pk=instance.pk).first()


def record_standing(*, kind: str, user_id: int | None = None, group_id: int | None = None,
                    tool_id: int | None = None) -> None:
    """Record (or renew) when one piece of standing became effective and who it came from: the
    approved change being applied, else the acting person (a change that needed nobody else),
    else nobody (shell, seed). Call in the transaction of the grant."""
    change = _applying.get()
    actor = current_actor()
    if change is not None:
        people = {"change": change, "proposer_id": change.proposed_by_id, "approver_id": change.decided_by_id,
                  "applied_by": "control change"}
    elif actor is not None:
        people = {"change": None, "proposer_id": actor.pk, "approver_id": None, "applied_by": "administrator"}
    else:
        people = {"change": None, "proposer_id": None, "approver_id": None, "applied_by": "shell/seed"}
    key = f"{kind}:{user_id or ''}:{group_id or ''}:{tool_id or ''}"
    StandingSource.objects.update_or_create(
        key=key, defaults={"kind": kind, "user_id": user_id, "group_id": group_id, "tool_id": tool_id,
                           "effective_at": clock.now(), **people})
