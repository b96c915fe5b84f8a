"""Reads of the tool registry: which tools a user is offered."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import Q
from guardian.utils import get_group_obj_perms_model, get_user_obj_perms_model

from tools.models import TenantToolPolicy, Tool
from tools.registry import ToolSpec, registry

_SQL: dict[tuple[str, bool], str] = {}
# The tenant's tighten-only overrides, read in the same statement and attached to each Tool row as
# `row.tenant_policy` (what tools.policy.effective_policy applies; docs/roles.md).
_TENANT_OVERRIDES = ("id", "tenant", "tool", "enabled", "risk_override", "quorum", "ttl_seconds")


def _offered_rows_sql(*, superuser: bool) -> str:
    """The SELECT of the Tool rows a user is offered, built once per backend from the models' tables.

    Parameters, in order: tenant id, then (non-superusers) `use_tool`'s content type id and the user
    id, twice. The rows are those of guardian's `get_objects_for_user(user, "tools.use_tool",
    accept_global_perms=False)` (no global grant counts) intersected with the tenant's enabled policies, as two
    EXISTS clauses on guardian's own tables; tests/tools/test_offered_tools.py checks it against
    guardian for direct, group, revoked and cross-tenant grants. It is written out rather than
    composed with the ORM because it runs at the start and on every resume of every run, and the
    ORM's compile of this query cost about 3.5 ms of the 5 ms it took (bench/confirm_latency.py).
    """
    key = (connection.vendor, superuser)
    sql = _SQL.get(key)
    if sql is not None:
        return sql
    q = connection.ops.quote_name
    tool, policy = Tool._meta, TenantToolPolicy._meta
    user_perms, group_perms = get_user_obj_perms_model(Tool)._meta, get_group_obj_perms_model(Tool)._meta
    user_groups = get_user_model()._meta.get_field("groups").remote_field.through._meta
    permission = Permission._meta
    columns = ", ".join([f"t.{q(f.column)}" for f in tool.concrete_fields]
                        + [f"p.{q(policy.get_field(name).column)}" for name in _TENANT_OVERRIDES])
    sql = (f"SELECT {columns} FROM {q(tool.db_table)} t "
           f"JOIN {q(policy.db_table)} p ON p.{q('tool_id')} = t.{q('id')} "
           f"WHERE t.{q('enabled')} AND t.{q('registered')} AND p.{q('enabled')} AND p.{q('tenant_id')} = %s"
           # A tool of one tenant's MCP server is never offered elsewhere, whatever policy rows say.
           f" AND (t.{q('tenant_id')} IS NULL OR t.{q('tenant_id')} = p.{q('tenant_id')})")
    if not superuser:  # as in guardian, a superuser holds every object permission
        object_pk = f"CAST(t.{q('id')} AS VARCHAR(255))"  # guardian's generic tables store object_pk as text
        use_tool = f"ap.{q('codename')} = 'use_tool' AND ap.{q('content_type_id')} = %s"
        sql += (f" AND (EXISTS (SELECT 1 FROM {q(user_perms.db_table)} u"
                f" JOIN {q(permission.db_table)} ap ON ap.{q('id')} = u.{q('permission_id')}"
                f" WHERE {use_tool} AND u.{q('user_id')} = %s AND u.{q('object_pk')} = {object_pk})"
                f" OR EXISTS (SELECT 1 FROM {q(group_perms.db_table)} g"
                f" JOIN {q(permission.db_table)} ap ON ap.{q('id')} = g.{q('permission_id')}"
                f" JOIN {q(user_groups.db_table)} ug ON ug.{q('group_id')} = g.{q('group_id')}"
                f" WHERE {use_tool} AND ug.{q(user_groups.get_field('user').column)} = %s"
                f" AND g.{q('object_pk')} = {object_pk}))")
    if not superuser:
        # The user's model permissions ("app_label.codename", direct or through a group), read
        # once in the same statement (an uncorrelated subquery, evaluated once): Django's
        # ModelBackend would send two more queries for them on each freshly loaded user.
        user_table = get_user_model()._meta.get_field("user_permissions").remote_field.through._meta
        content_type = ContentType._meta
        user_column = q(user_table.get_field("user").column)
        aggregate = ("string_agg({}, ' ')" if connection.vendor == "postgresql" else "group_concat({}, ' ')").format(
            f"ct.{q('app_label')} || '.' || pm.{q('codename')}")
        perms = (f"(SELECT {aggregate} FROM {q(permission.db_table)} pm"
                   f" JOIN {q(content_type.db_table)} ct ON ct.{q('id')} = pm.{q('content_type_id')}"
                   f" WHERE pm.{q('id')} IN (SELECT up.{q('permission_id')} FROM {q(user_table.db_table)} up"
                   f" WHERE up.{user_column} = %s"
                   f" UNION SELECT gp.{q('permission_id')} FROM {q(Group._meta.get_field('permissions').remote_field.through._meta.db_table)} gp"
                   f" JOIN {q(user_groups.db_table)} ug2 ON ug2.{q('group_id')} = gp.{q('group_id')}"
                   f" WHERE ug2.{q(user_groups.get_field('user').column)} = %s))")
        sql = sql.replace("SELECT ", f"SELECT {perms}, ", 1)
    sql += f" ORDER BY t.{q('name')}"
    _SQL[key] = sql
    return sql


def offered_tools(*, user) -> dict[str, tuple[ToolSpec, Tool]]:
    """Return name -> (spec, row) of the tools offered to `user` now.

    Offered = registered in code, enabled globally, enabled for the user's tenant by a
    TenantToolPolicy row, `use_tool` held on the row (user or group, no global grant), and the
    tool's own Django permission held. A user without a tenant is offered nothing. Each row
    carries the tenant's TenantToolPolicy as `row.tenant_policy`, so `effective_policy(spec, row)`
    applies the tenant's tighten-only overrides.
    """
    if user.tenant_id is None or not user.is_active:
        return {}
    params: list = [user.tenant_id]
    skip = 0
    if not user.is_superuser:
        content_type = ContentType.objects.get_for_model(Tool).pk  # cached by Django per process
        params = [user.pk, user.pk] + params + [content_type, user.pk, content_type, user.pk]
        skip = 1
    names = [f.attname for f in Tool._meta.concrete_fields]
    policy_names = [TenantToolPolicy._meta.get_field(name).attname for name in _TENANT_OVERRIDES]
    with connection.cursor() as cursor:
        cursor.execute(_offered_rows_sql(superuser=user.is_superuser), params)
        rows = cursor.fetchall()
    if rows and skip and not hasattr(user, "_perm_cache"):
        # What ModelBackend.get_all_permissions caches on the instance (an active non-superuser's
        # direct and group permissions): `user.has_perm` below and in the pipeline reads it.
        user._perm_cache = set((rows[0][0] or "").split())
    offered: dict[str, tuple[ToolSpec, Tool]] = {}
    for values in rows:
        values = values[skip:]
        row = Tool.from_db(connection.alias, names, values[:len(names)])
        row.tenant_policy = TenantToolPolicy.from_db(connection.alias, policy_names, values[len(names):])
        spec = registry.get(row.name)
        if spec is None or (spec.permission and not user.has_perm(spec.permission)):
            continue
        offered[row.name] = (spec, row)
    return offered


def tool_available_to_tenant(*, name: str, tenant_id: int) -> bool:
    """True when `name` is a registered tool enabled globally and for the tenant (whether or not
    this user may use it). Distinguishes PERMISSION_DENIED from TOOL_NOT_FOUND when a call names
    a tool not offered."""
    if registry.get(name) is None:
        return False
    return Tool.objects.filter(
        Q(tenant__isnull=True) | Q(tenant_id=tenant_id),
        name=name, enabled=True, registered=True, tenant_policies__tenant_id=tenant_id, tenant_policies__enabled=True,
    ).exists()


def tool_unavailable_reason(*, name: str, user, tenant_id: int) -> tuple[str, str]:
    """Why `name` is not offered to `user` now, as (code, message) for the model and the audit:
    TOOL_NOT_FOUND (not registered, no Tool row), TOOL_DISABLED (disabled globally, no longer
    registered, or not enabled for the user's tenant) or PERMISSION_DENIED (the user lacks
    `use_tool` or the tool's permission, is inactive, or no longer belongs to the run's tenant
    `tenant_id`). Used when a decided call is consumed (docs/decisions.md: a policy denial is
    distinct from a tool that never existed)."""
    if not user.is_active or user.tenant_id != tenant_id:
        return "PERMISSION_DENIED", "the requester is no longer an active member of this tenant; nothing was done"
    row = Tool.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id), name=name).first() \
        if registry.get(name) is not None else None
    if row is None:
        return "TOOL_NOT_FOUND", f"no tool named {name[:100]!r} exists"
    if not row.enabled or not row.registered:
        return "TOOL_DISABLED", f"the tool {name} was disabled after the call was requested; nothing was done"
    if not TenantToolPolicy.objects.filter(tool=row, tenant_id=user.tenant_id, enabled=True).exists():
        return "TOOL_DISABLED", f"the tool {name} was disabled for this tenant after the call was requested; nothing was done"
    return "PERMISSION_DENIED", f"the requester no longer may use {name}; nothing was done"
