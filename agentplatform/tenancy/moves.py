"""Moving a user to another tenant ends every authority of the old tenant (docs/roles.md,
"Moving a user to another tenant").

Called by `User.save()` inside the transaction that changes `tenant`, whoever saves (an operator
in the admin, a service, `manage.py shell`); not a top-level service: it asserts it runs inside
the caller's transaction. Each removal goes through the ORM one row at a time, so the
control-plane receivers audit every one of them; the apps above tenancy end what they own through
the `user_tenant_changed` signal (API keys: agentplatform.api; open confirmation requests and
running runs: agentplatform.runtime). A summary row (CONTROL_CHANGE, kind tenant_move) goes to
both tenants' trails.

What is removed, and why all of it: object grants (guardian rows on tools are global rows whose
meaning was "may use / approve in the old tenant"), every group membership (a tenant's groups
are that tenant's; a platform-wide group's membership was also decided for the old tenancy, so
the operator grants it again if still meant), every direct global permission, and staff status
(a tenant administrator moved to another tenant would otherwise administer it).
"""
from __future__ import annotations

from typing import Any

from django.db import connection
from guardian.models import UserObjectPermission

from agentplatform.tenancy.actor import current_actor, current_channel
from agentplatform.tenancy.roles import admin_role
from agentplatform.tenancy.signals import user_tenant_changed
from audit import events


def user_tenant_moving(*, user: Any) -> None:
    """Before the save that moves `user`: clear staff status (a superuser keeps theirs: an
    operator's role is not a tenant's)."""
    if not user.is_superuser:
        user.is_staff = False


def user_tenant_moved(*, user: Any, old_tenant_id: int) -> dict[str, int]:
    """After the save that moved `user` out of `old_tenant_id`, in the same transaction: remove
    their object grants, group memberships and direct global permissions, let the apps above
    end keys, requests and runs (signal `user_tenant_changed`), and write the summary audit row.

    Sessions end without a write: the session hash includes the tenant id
    (User._get_session_auth_hash). Returns counts {"object_grants", "groups", "permissions"}.
    Raises what a receiver raises (the move is rolled back with it) and AssertionError outside a
    transaction.
    """
    assert connection.in_atomic_block, "user_tenant_moved runs inside the transaction of the move"
    grants = 0
    for row in UserObjectPermission.objects.filter(user_id=user.pk).order_by("pk"):
        row.delete()  # audited by the control-plane receivers, one row per grant
        grants += 1
    groups = user.groups.count()
    user.groups.clear()  # audited (membership changed)
    permissions = user.user_permissions.count()
    user.user_permissions.clear()  # audited (user_permissions changed)
    actor = current_actor()
    user_tenant_changed.send(sender=type(user), user=user, old_tenant_id=old_tenant_id,
                             new_tenant_id=user.tenant_id, actor_id=getattr(actor, "pk", None))
    removed = {"object_grants": grants, "groups": groups, "permissions": permissions}
    details = {"object": {"type": "tenant_move", "id": user.username}, "old": {"tenant_id": old_tenant_id},
               "new": {"tenant_id": user.tenant_id}, "removed": removed,
               "actor_role": admin_role(actor) if actor is not None else (current_channel() or "system"),
               "scope": "tenant"}
    for tenant_id in sorted({old_tenant_id} | ({user.tenant_id} if user.tenant_id else set())):
        events.control_change_recorded(tenant_id=tenant_id, status="CHANGED",
                      actor_id=getattr(actor, "pk", None), masked_arguments=details,
                      message=f"tenant_move {user.username}: tenant {old_tenant_id} -> {user.tenant_id}; "
                              f"removed {grants} object grant(s), {groups} group membership(s), "
                              f"{permissions} permission(s); keys, sessions, open requests and runs ended")
    return removed
