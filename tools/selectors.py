"""Reads of the tool registry: which tools a user is offered."""
from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db.models import CharField, Exists, OuterRef, Q
from django.db.models.functions import Cast
from guardian.utils import get_group_obj_perms_model, get_user_obj_perms_model

from tools.models import Tool
from tools.registry import ToolSpec, registry


def _holds_use_tool(user) -> Q:
    """Tool rows on which `user` holds the `use_tool` object permission, directly or through a group.

    The same rows as guardian's `get_objects_for_user(user, "tools.use_tool", accept_global_perms=False)`
    (STYLE rule 6) for a non-superuser, as two EXISTS clauses instead of guardian's generic nested
    subqueries. This selector runs on every governed call; bench/governance_overhead.py measured the
    guardian form at about twice the cost (README, Benchmarks).
    """
    perm = Q(permission__content_type=ContentType.objects.get_for_model(Tool), permission__codename="use_tool")
    pk = Cast(OuterRef("pk"), CharField())  # guardian's generic tables store object_pk as text
    direct = get_user_obj_perms_model(Tool).objects.filter(perm, user=user, object_pk=pk)
    via_group = get_group_obj_perms_model(Tool).objects.filter(perm, group__user=user, object_pk=pk)
    return Q(Exists(direct)) | Q(Exists(via_group))


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
    if not user.is_superuser:  # as in guardian, a superuser holds every object permission
        rows = rows.filter(_holds_use_tool(user))
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
