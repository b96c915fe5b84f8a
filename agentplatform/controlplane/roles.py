"""The four roles a tenant's member can hold, and which ones each holds now (reads only).

| role | what makes it | granted by (agentplatform.controlplane.role_grants) |
| --- | --- | --- |
| requester | `use_tool` on at least one tool (directly or through a group) | use_tool on the tenant's offered tools and their permissions |
| approver | `approve_tool` on at least one tool (directly or through a group) | membership of the tenant's approvers group (a second administrator approves) |
| administrator | staff in the tenant (tenancy.roles.TENANT_ADMINISTRATOR) | staff status (a second administrator approves) |
| auditor | AUDITOR_PERMISSION (directly or through a group) | membership of the `<tenant>-auditors` group |
"""
from __future__ import annotations

from typing import Any, Iterable

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from guardian.models import GroupObjectPermission, UserObjectPermission

from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import AUDITOR_PERMISSION
from tools.models import Tool

REQUESTER, APPROVER, ADMINISTRATOR, AUDITOR = "requester", "approver", "administrator", "auditor"
ROLES = (REQUESTER, APPROVER, ADMINISTRATOR, AUDITOR)
ROLE_LABELS = {REQUESTER: _("Requester"), APPROVER: _("Approver"), ADMINISTRATOR: _("Administrator"),
               AUDITOR: _("Auditor")}
ROLE_HELP = {
    REQUESTER: _("Asks the assistant to use the tools: may use every tool enabled for the tenant."),
    APPROVER: _("Approves or rejects other people's requests: a member of the tenant's approvers group. "
                "A second administrator must agree before it takes effect."),
    ADMINISTRATOR: _("Manages this tenant in the admin: its members, groups, tools and policies. "
                     "A second administrator must agree before it takes effect."),
    AUDITOR: _("Reads, exports and verifies the tenant's audit trail; changes nothing."),
}


def approvers_group_name(tenant_slug: str) -> str:
    """The name of a tenant's approvers group ("acme-approvers")."""
    return f"{tenant_slug}-approvers"


def auditors_group_name(tenant_slug: str) -> str:
    """The name of a tenant's auditors group ("acme-auditors")."""
    return f"{tenant_slug}-auditors"


def _object_perm_holders(user_ids: set[int], codename: str) -> set[int]:
    """Of `user_ids`, who holds the tools object permission `codename` on some tool, directly or
    through a group (two queries)."""
    ct = ContentType.objects.get_for_model(Tool)
    direct = set(UserObjectPermission.objects.filter(user_id__in=user_ids, permission__codename=codename,
                                                     content_type=ct).values_list("user_id", flat=True))
    groups = GroupObjectPermission.objects.filter(permission__codename=codename, content_type=ct).values("group_id")
    via = set(User.groups.through.objects.filter(user_id__in=user_ids, group_id__in=groups)
              .values_list("user_id", flat=True))
    return direct | via


def _auditors(user_ids: set[int]) -> set[int]:
    app_label, codename = AUDITOR_PERMISSION.split(".")
    permission = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    direct = set(User.user_permissions.through.objects.filter(user_id__in=user_ids, permission__in=permission)
                 .values_list("user_id", flat=True))
    groups = Group.objects.filter(permissions__in=permission).values("pk")
    via = set(User.groups.through.objects.filter(user_id__in=user_ids, group_id__in=groups)
              .values_list("user_id", flat=True))
    return direct | via


def roles_held(users: Iterable[Any]) -> dict[int, list[str]]:
    """{user id: the roles (in ROLES order) each of `users` holds now}, in a fixed handful of
    queries whatever their number (the users' changelist asks for a page at once). A superuser is
    an operator, not one of these roles: listed as administrator. Inactive accounts hold none."""
    users = [u for u in users]
    ids = {u.pk for u in users if u.is_active}
    if not ids:
        return {u.pk: [] for u in users}
    requesters = _object_perm_holders(ids, "use_tool")
    approvers = _object_perm_holders(ids, "approve_tool")
    auditors = _auditors(ids)
    held: dict[int, list[str]] = {}
    for user in users:
        if user.pk not in ids:
            held[user.pk] = []
            continue
        flags = {REQUESTER: user.pk in requesters, APPROVER: user.pk in approvers,
                 ADMINISTRATOR: user.is_superuser or (user.is_staff and user.tenant_id is not None),
                 AUDITOR: user.pk in auditors}
        held[user.pk] = [role for role in ROLES if flags[role]]
    return held


def tenant_approver_groups(tenant_id: int) -> Any:
    """The tenant's groups that hold approve_tool on some tool (a QuerySet of Group)."""
    ct = ContentType.objects.get_for_model(Tool)
    granted = GroupObjectPermission.objects.filter(permission__codename="approve_tool", content_type=ct)
    return Group.objects.filter(tenant_link__tenant_id=tenant_id, pk__in=granted.values("group_id"))


def tenant_auditor_groups(tenant_id: int) -> Any:
    """The tenant's groups that hold AUDITOR_PERMISSION (a QuerySet of Group)."""
    app_label, codename = AUDITOR_PERMISSION.split(".")
    return Group.objects.filter(Q(tenant_link__tenant_id=tenant_id), permissions__content_type__app_label=app_label,
                                permissions__codename=codename).distinct()
