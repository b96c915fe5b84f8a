"""The demo's read-only personas.

`<tenant>-auditor` is a member of the group `<tenant>-auditors`, which holds AUDITOR_PERMISSION
(read, export and verify the tenant's audit trail) and nothing else: not staff, no tool
permission, no catalog permission (docs/audit.md). Idempotent like the rest of the seed: the group
and the persona are created when missing; with `reset` the group's permission and the membership
are put back and the persona is active again. `strip_user` leaves the seeded `<t>-nobody` without
any permission, group or tool grant.
"""
from __future__ import annotations

from typing import Callable

from django.contrib.auth.models import Group, Permission
from guardian.shortcuts import get_perms, remove_perm

from agentplatform.tenancy.models import Tenant, TenantGroup, User
from agentplatform.tenancy.roles import AUDITOR_PERMISSION
from agentplatform.tenancy.services import tenant_group_create

PERSONA = "auditor"


def _permission() -> Permission:
    app_label, codename = AUDITOR_PERMISSION.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def seed_auditor(tenant: Tenant, *, reset: bool, make_user: Callable[..., tuple[User, bool]]) -> User:
    """The persona `<tenant>-auditor` and its group `<tenant>-auditors`, created when missing.

    make_user: the seed's persona maker (tenant, name, reset=..., **flags) -> (user, created).
    Returns the user. Runs inside the seed's transaction."""
    group = Group.objects.filter(name=f"{tenant.slug}-auditors").first()
    new_group = group is None
    if new_group:  # audited in this tenant's trail only
        group = tenant_group_create(name=f"{tenant.slug}-auditors", tenant_id=tenant.pk)
    TenantGroup.objects.get_or_create(group=group, defaults={"tenant": tenant})
    if new_group or reset:
        group.permissions.add(_permission())
    user, created = make_user(tenant, PERSONA, reset=reset, is_staff=False, is_superuser=False)
    if created or reset:
        user.groups.add(group)
    return user


def auditor_changes(tenant: Tenant) -> list[str]:
    """What differs from the seeded auditor of `tenant`, one English sentence each. Reads only."""
    user = User.objects.filter(username=f"{tenant.slug}-{PERSONA}", tenant=tenant).first()
    if user is None:
        return []
    changes = []
    if not user.is_active:
        changes.append(f"{user.username} is deactivated")
    elif not user.has_perm(AUDITOR_PERMISSION):
        changes.append(f"{user.username} may no longer read the audit trail")
    if user.is_staff or user.user_permissions.exists():
        changes.append(f"{user.username} was given permissions")
    return changes


def strip_user(user: User, tools) -> None:
    """No permission, group or tool grant left on `user` (the seeded `<t>-nobody`; `tools`: Tool rows)."""
    user.user_permissions.clear()
    user.groups.clear()
    for tool in tools:
        for perm in get_perms(user, tool):
            remove_perm(f"tools.{perm}", user, tool)
