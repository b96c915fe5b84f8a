"""Grant what a user lacks to use a tool (tools.access): the effective-access page's Grant action and
the requester role (agentplatform.controlplane.roles) both go through here.

Only the conditions a tenant administrator answers for are granted (GRANTABLE): the tool's entry in
the tenant's whitelist, `use_tool` on the tool, and the tool's own permission. Who grants may only
give what they may delegate (the global permissions they hold themselves, as on the user's page);
the platform's switch and a membership are someone else's act. Every write goes through the
ordinary models (guardian's `assign_perm`, the many-to-many manager, tools.services), so the
control-plane audit receivers write their rows and the guards see it like any other grant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import Permission
from django.db import transaction
from django.utils.translation import gettext as _
from guardian.shortcuts import assign_perm

from agentplatform.tenancy.admin_scope import held_permissions
from agentplatform.tenancy.roles import can_administer_user
from core.errors import NotFoundError, PermissionDeniedError
from tools.access import tool_access
from tools.display import tool_label
from tools.models import Tool, enable_refusal
from tools.services import tenant_tool_set_enabled

GRANTABLE = ("tenant", "use_tool", "permission")


class AccessGrantRefused(PermissionDeniedError):
    """The granter may not give this (not their member, or a permission they do not hold)."""

    code = "ACCESS_GRANT_REFUSED"


@dataclass
class AccessGrantResult:
    """What one Grant did for one tool: `granted` and `refused` hold condition keys; `reasons`
    says, per refused key, why (a sentence for people)."""

    tool: str
    granted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)


def _permission(name: str) -> Permission | None:
    app_label, _sep, codename = name.partition(".")
    return Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()


def _grant_one(*, actor: Any, user: Any, tool: Tool, key: str, result: AccessGrantResult) -> None:
    if key == "tenant":
        refusal = enable_refusal(tool)
        if refusal:
            result.refused.append(key)
            result.reasons[key] = refusal
            return
        tenant_tool_set_enabled(tenant_id=user.tenant_id, tool_name=tool.name, enabled=True)
    elif key == "use_tool":
        assign_perm("tools.use_tool", user, tool)
    elif key == "permission":
        name = tool_access(user=user, tool=tool).permission
        permission = _permission(name)
        if permission is None or not held_permissions(actor).filter(pk=permission.pk).exists():
            result.refused.append(key)
            result.reasons[key] = _("you do not hold the permission %(name)s yourself, so you cannot give it; "
                                    "a platform operator can") % {"name": name}
            return
        user.user_permissions.add(permission)
    result.granted.append(key)


def access_grant_inline(*, actor: Any, user: Any, tool: Tool) -> AccessGrantResult:
    """Grant `user` what they lack of GRANTABLE to use `tool`, inside the caller's transaction.
    Returns the AccessGrantResult (what was granted, what was refused and why). Raises
    AccessGrantRefused when `actor` may not administer `user` or `user` has no tenant."""
    if not can_administer_user(actor, user) or user.tenant_id is None:
        raise AccessGrantRefused(_("you may not grant anything to this user"))
    result = AccessGrantResult(tool=tool_label(tool.name))
    for condition in tool_access(user=user, tool=tool).missing:
        if condition.key in GRANTABLE:
            _grant_one(actor=actor, user=user, tool=tool, key=condition.key, result=result)
    return result


@transaction.atomic(durable=True)
def access_grant(*, actor: Any, user: Any, tool_ids: list[int]) -> list[AccessGrantResult]:
    """Grant `user` what they lack (of GRANTABLE) to use each tool of `tool_ids` that their tenant
    can see, in one transaction. Returns one AccessGrantResult per tool, by name. Raises
    AccessGrantRefused (see access_grant_inline), NotFoundError for a tool their tenant cannot see."""
    tools = list(Tool.objects.filter(pk__in=tool_ids, registered=True).order_by("name"))
    if len(tools) != len(set(tool_ids)) or any(t.tenant_id not in (None, user.tenant_id) for t in tools):
        raise NotFoundError(_("unknown tool"))
    return [access_grant_inline(actor=actor, user=user, tool=tool) for tool in tools]
