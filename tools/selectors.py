"""Reads of the tool registry: which tools a user is offered."""
from __future__ import annotations

from guardian.shortcuts import get_objects_for_user

from tools.models import Tool
from tools.registry import ToolSpec, registry


def offered_tools(*, user) -> dict[str, tuple[ToolSpec, Tool]]:
    """Return name -> (spec, row) of the tools offered to `user` now (DESIGN section 5.1).

    Offered = registered in code, enabled globally, enabled for the user's tenant by a
    TenantToolPolicy row, `use_tool` held on the row (user or group, no global grant), and the
    tool's own Django permission held. A user without a tenant is offered nothing.
    """
    if user.tenant_id is None or not user.is_active:
        return {}
    rows = Tool.objects.filter(
        enabled=True, registered=True, tenant_policies__tenant_id=user.tenant_id, tenant_policies__enabled=True
    )
    rows = get_objects_for_user(user, "tools.use_tool", klass=rows, accept_global_perms=False)
    offered: dict[str, tuple[ToolSpec, Tool]] = {}
    for row in rows:
        spec = registry.get(row.name)
        if spec is None or (spec.permission and not user.has_perm(spec.permission)):
            continue
        offered[row.name] = (spec, row)
    return offered


def tool_available_to_tenant(*, name: str, tenant_id: int) -> bool:
    """True when `name` is a registered tool enabled globally and for the tenant (whether or not
    this user may use it). Distinguishes PERMISSION_DENIED from TOOL_NOT_FOUND in step 1."""
    if registry.get(name) is None:
        return False
    return Tool.objects.filter(
        name=name, enabled=True, registered=True, tenant_policies__tenant_id=tenant_id, tenant_policies__enabled=True
    ).exists()
