"""The writer of every control-plane audit row: one CONTROL_CHANGE AuditEvent per affected tenant,
in the caller's transaction, with actor, object and old -> new values (secrets as "<changed>")."""
from __future__ import annotations

from typing import Any

from agentplatform.tenancy.actor import current_actor, current_channel
from agentplatform.tenancy.roles import admin_role
from audit import events
from audit.models import AuditEvent

SECRET = "<changed>"
SECRET_KEYS = frozenset({"password", "secret"})  # audited as "<changed>", never their value


def _secret_safe(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None or not SECRET_KEYS & set(values):
        return values
    return {k: v for k, v in values.items() if k not in SECRET_KEYS}


def control_change(*, kind: str, verb: str, ident: str, tenants: list[int], old: dict | None, new: dict | None,
                   tool_name: str = "") -> list[AuditEvent]:
    """Write one CONTROL_CHANGE AuditEvent per affected tenant, in the caller's transaction.

    verb: CREATED, CHANGED or DELETED (the row's status). old/new: the audited values before and
    after (None for created/deleted); only changed keys are kept for CHANGED, and a password
    change is recorded as "<changed>", never its hash. Returns the rows written (none when
    nothing audited changed). Raises DatabaseError when the write fails, which rolls the change
    back with it (fail closed).
    """
    if verb == "CHANGED":
        changed = [k for k in (new or {}) if (old or {}).get(k) != new[k]]
        if not changed:
            return []
        old = {k: (SECRET if k in SECRET_KEYS else old.get(k)) for k in changed}
        new = {k: (SECRET if k in SECRET_KEYS else new[k]) for k in changed}
    else:
        old, new = _secret_safe(old), _secret_safe(new)
    actor = current_actor()
    summary = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new) if verb == "CHANGED" else ""
    message = f"{kind} {ident} {verb.lower()}" + (f": {summary}" if summary else "")
    details = {"object": {"type": kind, "id": ident}, "old": old, "new": new,
               "actor_role": _actor_role(actor),
               "scope": "platform" if len(tenants) != 1 else "tenant"}
    return [events.control_change_recorded(tenant_id=tenant_id, status=verb, actor_id=getattr(actor, "pk", None),
                                           tool_name=tool_name, masked_arguments=details, message=message)
            for tenant_id in tenants]


def _actor_role(actor: Any) -> str | None:
    """The role named in a row: the actor's administrative role (None for a member); without an actor,
    the channel that said where the change came from (`tenancy.actor.acting_via`, e.g. "shell
    (manage.py issue_api_token)"), else the generic system label."""
    if actor is not None:
        return admin_role(actor)
    return current_channel() or "system (no request: shell, task or seed)"
