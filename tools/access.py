"""Effective access: may this user use this tool, and if not, which condition is missing.

A tool is offered to a user (tools.selectors.offered_tools, what the pipeline applies) only when
every condition below holds. This module checks them one by one, independently of each other, so
the admin can show all that is missing at once (docs/roles.md, "Effective access") and the chat's
refusal can name what the requester lacks.

| key | condition | who can fix it |
| --- | --- | --- |
| `member` | the account is active and belongs to a tenant | tenant administrator (activate) / operator (tenant) |
| `platform` | the tool is registered in code and enabled globally | platform operator |
| `tenant` | the tool is enabled for the user's tenant (whitelist entry) | tenant administrator |
| `use_tool` | `tools.use_tool` on the tool, granted to the user or one of their groups | tenant administrator |
| `permission` | the tool's own Django permission (e.g. `catalog.cancel_order`), direct or through a group | tenant administrator |

Reads only; a superuser holds every permission (as Django and guardian say).
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Permission
from django.db.models import Q
from guardian.utils import get_group_obj_perms_model, get_user_obj_perms_model

from tools.models import TenantToolPolicy, Tool
from tools.registry import registry

GRANTS = ("member", "use_tool", "permission")  # the conditions that are about the user, not the tool


@dataclass(frozen=True)
class Condition:
    """One condition of access. `key` is stable (see the module's table); `label` and `fix` are
    bilingual sentences for people; `held` says whether it holds now."""

    key: str
    label: str
    held: bool
    fix: str


@dataclass(frozen=True)
class ToolAccess:
    """Every condition of `tool` for one user, in the order of the module's table."""

    tool: str
    permission: str
    conditions: tuple[Condition, ...]

    @property
    def allowed(self) -> bool:
        """True when every condition holds: the tool is offered to the user."""
        return all(c.held for c in self.conditions)

    @property
    def missing(self) -> list[Condition]:
        """The conditions that do not hold (empty when allowed)."""
        return [c for c in self.conditions if not c.held]

    def condition(self, key: str) -> Condition:
        """The condition with `key`. Raises KeyError for an unknown key."""
        for c in self.conditions:
            if c.key == key:
                return c
        raise KeyError(key)


def _has_use_tool(user, tool: Tool) -> bool:
    if user.is_superuser:
        return True
    object_pk = str(tool.pk)
    direct = get_user_obj_perms_model(Tool).objects.filter(
        user=user, permission__codename="use_tool", permission__content_type__app_label="tools", object_pk=object_pk)
    via_group = get_group_obj_perms_model(Tool).objects.filter(
        group__user=user, permission__codename="use_tool", permission__content_type__app_label="tools",
        object_pk=object_pk)
    return direct.exists() or via_group.exists()


def _has_permission(user, permission: str) -> bool:
    if not permission or user.is_superuser:
        return True
    app_label, _, codename = permission.partition(".")
    return Permission.objects.filter(Q(user=user) | Q(group__user=user), content_type__app_label=app_label,
                                     codename=codename).exists()


def tool_access(*, user, tool: Tool) -> ToolAccess:
    """The effective access of `user` (a User row) to `tool` (a Tool row): each condition checked
    on its own, whatever the others say. Reads only; a handful of queries."""
    spec = registry.get(tool.name)
    permission = spec.permission if spec is not None else ""
    tenant_ok = bool(user.tenant_id) and TenantToolPolicy.objects.filter(
        tool=tool, tenant_id=user.tenant_id, enabled=True).exists()
    conditions = (
        Condition("member", "active member of a tenant / 租户的在职成员", bool(user.is_active and user.tenant_id),
                  "a tenant administrator activates the account; a platform operator sets its tenant "
                  "/ 由租户管理员启用账号"),
        Condition("platform", "tool enabled on the platform / 平台已启用该工具",
                  spec is not None and tool.registered and tool.enabled,
                  "a platform operator enables the tool (Tools) / 由平台运营者启用"),
        Condition("tenant", "tool enabled for the tenant / 租户已启用该工具", tenant_ok,
                  "a tenant administrator enables it in the tool whitelist / 由租户管理员在工具白名单中启用"),
        Condition("use_tool", f"use_tool granted on {tool.name} / 已授予 use_tool", _has_use_tool(user, tool),
                  f"a tenant administrator grants use_tool on {tool.name} to the user or one of their groups "
                  "(Tools → the tool → Object permissions) / 由租户管理员授予 use_tool"),
        Condition("permission", f"permission {permission or '(none needed)'} / 工具所需权限",
                  _has_permission(user, permission),
                  f"a tenant administrator gives the user (or one of their groups) the permission {permission} "
                  "(Users → the user → User permissions) / 由租户管理员授予该权限"),
    )
    return ToolAccess(tool=tool.name, permission=permission, conditions=conditions)


def tools_access(*, user) -> list[ToolAccess]:
    """`tool_access` for every registered tool `user`'s tenant can see (the shared ones and its own
    MCP servers' tools; never another tenant's), by name."""
    visible = Tool.objects.filter(registered=True).filter(Q(tenant__isnull=True) | Q(tenant_id=user.tenant_id))
    return [tool_access(user=user, tool=tool) for tool in visible.order_by("name")]


def refusal_message(access: ToolAccess) -> str:
    """What the requester is told when the model proposed `access.tool` and they may not use it:
    the grants they lack (use_tool, the tool's permission, their membership), bilingual, and who
    can give them. Only the requester's own standing and the tool's name are named, never another
    tenant's data. Call it only for a tool enabled for the requester's tenant (otherwise the tool
    is answered as not found)."""
    missing = [c for c in access.missing if c.key in GRANTS]
    parts_en, parts_zh = [], []
    for c in missing:
        if c.key == "use_tool":
            parts_en.append(f"use_tool on the tool {access.tool}")
            parts_zh.append(f"工具 {access.tool} 的 use_tool 授权")
        elif c.key == "permission":
            parts_en.append(f"the permission {access.permission}")
            parts_zh.append(f"权限 {access.permission}")
        else:
            parts_en.append("an active membership of this tenant")
            parts_zh.append("有效的租户成员身份")
    if not parts_en:
        return f"you may not use the tool {access.tool} / 您无权使用工具 {access.tool}"
    return (f"you may not use the tool {access.tool}: missing {' and '.join(parts_en)}; ask your tenant "
            f"administrator to grant it / 您无权使用工具 {access.tool}：缺少{'和'.join(parts_zh)}，请联系租户管理员授予")
