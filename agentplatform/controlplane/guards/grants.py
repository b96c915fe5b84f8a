"""Guards on who holds `tools.approve_tool`: the object permission given to a user or a group
(guardian's `assign_perm`, its admin pages, a row saved by hand), and a member added to a group
that holds it (from either side of the many-to-many). Revoking and removing are never guarded.
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db.models.signals import m2m_changed, post_save, pre_save
from guardian.models import GroupObjectPermission, UserObjectPermission

from agentplatform.controlplane.guards.gate import Gated, gate, record_standing, stored_row
from agentplatform.controlplane.standing import APPROVE
from agentplatform.tenancy.models import TenantGroup, User
from tools.models import Tool


def _tool_ct_id() -> int:
    return ContentType.objects.get_for_model(Tool).pk


def _is_approve_row(row: Any) -> bool:
    permission = row.permission
    return permission.codename == APPROVE and permission.content_type.app_label == "tools" \
        and permission.content_type.model == "tool"


def group_approves(group_id: int) -> list[str]:
    """Names of the tools group `group_id` holds approve_tool on."""
    pks = GroupObjectPermission.objects.filter(group_id=group_id, permission__codename=APPROVE,
                                               content_type_id=_tool_ct_id()).values_list("object_pk", flat=True)
    return sorted(Tool.objects.filter(pk__in=[int(p) for p in pks]).values_list("name", flat=True))


def user_approves(user_id: int) -> bool:
    """Whether user `user_id` holds approve_tool on any tool, directly or through a group."""
    ct = _tool_ct_id()
    return (UserObjectPermission.objects.filter(user_id=user_id, permission__codename=APPROVE,
                                                content_type_id=ct).exists()
            or GroupObjectPermission.objects.filter(group__user=user_id, permission__codename=APPROVE,
                                                    content_type_id=ct).exists())


def group_tenant_id(group_id: int) -> int | None:
    """The tenant a group belongs to (None: platform-wide)."""
    return TenantGroup.objects.filter(group_id=group_id).values_list("tenant_id", flat=True).first()


def _tool_name(object_pk: Any) -> str:
    return Tool.objects.filter(pk=int(object_pk)).values_list("name", flat=True).first() or f"tool #{object_pk}"


def _perm_pre_save(sender, instance, raw=False, **kwargs) -> None:
    if raw or not _is_approve_row(instance):
        return
    old = stored_row(sender, instance)
    subject = "user_id" if hasattr(instance, "user_id") else "group_id"
    if old is not None and _is_approve_row(old) and old.object_pk == instance.object_pk \
            and getattr(old, subject) == getattr(instance, subject):
        return  # the same grant saved again
    tool = _tool_name(instance.object_pk)
    if subject == "user_id":
        user = User.objects.filter(pk=instance.user_id).first()
        gate([Gated("USER_GRANT", getattr(user, "tenant_id", None),
                     {"user_id": instance.user_id, "tool_id": int(instance.object_pk)},
                     {"approve_tool": False}, {"approve_tool": True, "tool": tool, "user": getattr(user, "username", "")},
                     f"grant approve_tool on {tool} to {getattr(user, 'username', instance.user_id)}")])
    else:
        group = Group.objects.filter(pk=instance.group_id).first()
        members = sorted(User.objects.filter(groups=instance.group_id).values_list("username", flat=True))
        gate([Gated("GROUP_GRANT", group_tenant_id(instance.group_id),
                     {"group_id": instance.group_id, "tool_id": int(instance.object_pk)},
                     {"approve_tool": False},
                     {"approve_tool": True, "tool": tool, "group": getattr(group, "name", ""), "members": members},
                     f"grant approve_tool on {tool} to group {getattr(group, 'name', instance.group_id)} "
                     f"({len(members)} member(s): {', '.join(members[:10])})")])


def _perm_post_save(sender, instance, created, raw=False, **kwargs) -> None:
    if raw or not _is_approve_row(instance):
        return
    if hasattr(instance, "user_id"):
        record_standing(kind="USER_GRANT", user_id=instance.user_id, tool_id=int(instance.object_pk))
    else:
        record_standing(kind="GROUP_GRANT", group_id=instance.group_id, tool_id=int(instance.object_pk))


# -- membership of a group holding approve_tool ------------------------------------------------

def _pairs(instance, reverse: bool, pk_set) -> list[tuple[int, int]]:
    """(user_id, group_id) pairs an m2m add on User.groups is about to create."""
    if not pk_set:
        return []
    return [(pk, instance.pk) for pk in pk_set] if reverse else [(instance.pk, pk) for pk in pk_set]


def _membership_gated(user_id: int, group_id: int) -> Gated | None:
    tools = group_approves(group_id)
    if not tools:
        return None
    user = User.objects.filter(pk=user_id).first()
    group = Group.objects.filter(pk=group_id).first()
    username, groupname = getattr(user, "username", str(user_id)), getattr(group, "name", str(group_id))
    return Gated("MEMBERSHIP", getattr(user, "tenant_id", None) or group_tenant_id(group_id),
                 {"user_id": user_id, "group_id": group_id},
                 {"groups": "without " + groupname}, {"groups": "with " + groupname, "approve_tool_on": tools},
                 f"add {username} to group {groupname} (approve_tool on {', '.join(tools)})")


def _membership_changed(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    if action == "pre_add":
        pairs = _pairs(instance, reverse, pk_set)
        gate([g for g in (_membership_gated(u, gr) for u, gr in pairs) if g is not None])
        instance._standing_pairs = pairs
    elif action == "post_add":
        for user_id, group_id in getattr(instance, "_standing_pairs", None) or _pairs(instance, reverse, pk_set):
            record_standing(kind="MEMBERSHIP", user_id=user_id, group_id=group_id)
        instance._standing_pairs = None


def connect() -> None:
    """Connect these guards (AppConfig.ready)."""
    for model in (UserObjectPermission, GroupObjectPermission):
        uid = f"dualcontrol-{model._meta.label_lower}"
        pre_save.connect(_perm_pre_save, sender=model, dispatch_uid=uid + "-pre")
        post_save.connect(_perm_post_save, sender=model, dispatch_uid=uid + "-post")
    m2m_changed.connect(_membership_changed, sender=User.groups.through, dispatch_uid="dualcontrol-membership")
