"""Service accounts: a program's account is never an approver (docs/roles.md, "Service accounts").

A service account (`User.is_service_account`) is not a person. It authenticates with an API key
only, may request and be granted `use_tool`, and can never hold `tools.approve_tool` or count
toward a quorum: a quorum means that distinct people looked, and a program's key can be held by
anyone who holds the integration's configuration.

The rules below are called by the control-plane signal receivers
(agentplatform.controlplane.receivers), which see every path that changes who holds what: the
admin's forms, guardian's object-permission views and `assign_perm`, group m2m changes from
either side, `manage.py shell`. Each check raises ServiceAccountRefused inside the caller's
transaction, so the change is rolled back with it. guardian's bulk paths (`assign_perm` on a
queryset or a list of users use `bulk_create`) send no signals; for those the permission backend
(agentplatform.tenancy.backends) never answers True for `approve_tool` on a service account, and
the approvals services refuse a service account's decision (defence in depth).
"""
from __future__ import annotations

from typing import Any, Iterable

from django.contrib.auth.models import Group, Permission
from guardian.models import GroupObjectPermission, UserObjectPermission

from core.errors import PermissionDeniedError
from agentplatform.tenancy.models import User

APPROVE_APP_LABEL = "tools"
APPROVE_CODENAME = "approve_tool"
APPROVE_PERMISSION = f"{APPROVE_APP_LABEL}.{APPROVE_CODENAME}"


class ServiceAccountRefused(PermissionDeniedError):
    """A change would make a service account an approver (or a person-only role). HTTP 403."""

    code = "SERVICE_ACCOUNT_REFUSED"


def is_service_account(user: Any) -> bool:
    """True for a service account (any object; AnonymousUser and None give False)."""
    return bool(getattr(user, "is_service_account", False))


def _is_approve(permission: Permission | None) -> bool:
    return (permission is not None and permission.codename == APPROVE_CODENAME
            and permission.content_type.app_label == APPROVE_APP_LABEL)


def _approve_permission_ids() -> set[int]:
    return set(Permission.objects.filter(codename=APPROVE_CODENAME, content_type__app_label=APPROVE_APP_LABEL)
               .values_list("pk", flat=True))


def groups_holding_approve(group_ids: Iterable[int] | None = None) -> set[int]:
    """Ids of the groups (among `group_ids`, or all) that hold `approve_tool`, on any tool
    (guardian GroupObjectPermission) or globally (Group.permissions)."""
    perm_ids = _approve_permission_ids()
    object_grants = GroupObjectPermission.objects.filter(permission_id__in=perm_ids)
    global_grants = Group.objects.filter(permissions__in=perm_ids)
    if group_ids is not None:
        group_ids = list(group_ids)
        object_grants = object_grants.filter(group_id__in=group_ids)
        global_grants = global_grants.filter(pk__in=group_ids)
    return set(object_grants.values_list("group_id", flat=True)) | set(global_grants.values_list("pk", flat=True))


def holds_approve(user: Any) -> bool:
    """Whether `user` (saved) holds `approve_tool` anywhere: an object grant, a global permission,
    or a group that holds it."""
    perm_ids = _approve_permission_ids()
    if UserObjectPermission.objects.filter(user_id=user.pk, permission_id__in=perm_ids).exists():
        return True
    if Permission.objects.filter(user=user.pk, pk__in=perm_ids).exists():
        return True
    return bool(groups_holding_approve(user.groups.values_list("pk", flat=True)))


def _refuse(what: str) -> None:
    raise ServiceAccountRefused(
        f"{what}: a service account is not a person and can never approve (approve_tool) or count toward a quorum "
        "/ 服务账号不是人，永远不能持有审批权限")


# -- the rules, one per path ---------------------------------------------------------------------

def check_user_save(user: Any) -> None:
    """Before saving `user`: a service account is never staff or a superuser, and an account's
    kind is fixed when it is created: a person never becomes a service account (an administrator
    would then receive a key that acts as that person; one holding approve_tool would keep it),
    and a service account never becomes a person (whoever received its key would then hold a
    person's key, possibly an approver's). Raises ServiceAccountRefused."""
    if user.pk is not None and not user._state.adding:
        stored = type(user)._default_manager.filter(pk=user.pk).values_list("is_service_account", flat=True).first()
        if stored is not None and stored != is_service_account(user):
            if not stored and holds_approve(user):
                _refuse(f"{user.username} holds approve_tool and cannot become a service account")
            _refuse(f"{user.username}: an account's kind (person or service account) is fixed when it is created; "
                    "create a new account instead")
    if is_service_account(user) and (user.is_staff or user.is_superuser):
        _refuse(f"{user.username} cannot be staff or a superuser")


def check_user_object_grant(row: Any) -> None:
    """Before saving a guardian UserObjectPermission `row`. Raises ServiceAccountRefused."""
    if _is_approve(row.permission) and is_service_account(row.user):
        _refuse(f"approve_tool cannot be granted to {row.user.username}")


def check_group_object_grant(row: Any) -> None:
    """Before saving a guardian GroupObjectPermission `row`: approve_tool to a group with a
    service account among its members. Raises ServiceAccountRefused."""
    if _is_approve(row.permission):
        _refuse_group_with_service_accounts([row.group_id])


def _refuse_group_with_service_accounts(group_ids: Iterable[int]) -> None:
    member = User.objects.filter(groups__in=list(group_ids), is_service_account=True).first()
    if member is not None:
        _refuse(f"approve_tool cannot be granted to a group with the service account {member.username}")


def check_memberships(*, user_ids: Iterable[int], group_ids: Iterable[int]) -> None:
    """Before adding users to groups (either side of User.groups): a service account never joins a
    group that holds approve_tool. Raises ServiceAccountRefused."""
    service = list(User.objects.filter(pk__in=list(user_ids), is_service_account=True).values_list("username", flat=True))
    if service and groups_holding_approve(group_ids):
        _refuse(f"{service[0]} cannot join a group that holds approve_tool")


def check_user_permissions(*, user_ids: Iterable[int], permission_ids: Iterable[int]) -> None:
    """Before adding global permissions to users (either side of User.user_permissions)."""
    if not _approve_permission_ids() & set(permission_ids):
        return
    member = User.objects.filter(pk__in=list(user_ids), is_service_account=True).first()
    if member is not None:
        _refuse(f"approve_tool cannot be granted to {member.username}")


def check_group_permissions(*, group_ids: Iterable[int], permission_ids: Iterable[int]) -> None:
    """Before adding global permissions to groups (either side of Group.permissions)."""
    if _approve_permission_ids() & set(permission_ids):
        _refuse_group_with_service_accounts(group_ids)
