"""What the control-plane trail watches and how a row describes each object: per model, its kind,
the audited values (never a secret's value), the tenants a change concerns, a stable id and the
tool it is about (`WATCHED`); per many-to-many relation, its owner and how a related object is
named (`RELATIONS`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from django.contrib.auth.models import Group, Permission
from guardian.models import GroupObjectPermission, UserObjectPermission
from knox.models import get_token_model

from core.redaction.endpoints import command_line_digest, digest, names, url_record
from agentplatform.retention.models import TenantRetention
from agentplatform.tenancy.models import Tenant, TenantGroup, User
from agentplatform.tenancy.roles import admin_role
from agentplatform.tenancy.services import AUDIT_TENANT_ATTR
from mcp_sources.models import McpServer
from notifications.models import WebhookEndpoint
from notifications.urlcheck import host_of
from tools.models import TenantToolPolicy, Tool


def _perm(permission: Permission) -> str:
    return f"{permission.content_type.app_label}.{permission.codename}"


def _all_tenants() -> list[int]:
    return list(Tenant.objects.order_by("pk").values_list("pk", flat=True))


def _user_tenants(user: User | None) -> list[int]:
    """A tenant member's changes concern their tenant; an account without one (a platform
    operator) concerns every tenant."""
    if user is None or user.tenant_id is None:
        return _all_tenants()
    return [user.tenant_id]


def _group_tenants(group: Group | None) -> list[int]:
    link = TenantGroup.objects.filter(group_id=getattr(group, "pk", None)).first() if group is not None else None
    if link is not None:
        return [link.tenant_id]
    # A group being created for one tenant has no TenantGroup row yet: its creator says which
    # (tenancy.services.mark_group_tenant); otherwise it is platform-wide.
    pending = getattr(group, AUDIT_TENANT_ATTR, None) if group is not None else None
    return [pending] if pending is not None else _all_tenants()


@dataclass(frozen=True)
class Watched:
    """How one model's rows are described in the trail.

    kind: object type named in the row. snapshot(obj) -> dict of the audited values (never a
    secret: those appear as "<changed>"). tenants(obj) -> tenant ids the change affects.
    ident(obj) -> stable id shown (never a token key). tool(obj) -> tool name or "".
    """

    kind: str
    snapshot: Callable[[Any], dict[str, Any]]
    tenants: Callable[[Any], list[int]]
    ident: Callable[[Any], str]
    tool: Callable[[Any], str] = lambda obj: ""


def _user_snapshot(user: User) -> dict[str, Any]:
    return {"username": user.username, "email": user.email, "first_name": user.first_name,
            "last_name": user.last_name, "tenant": user.tenant.slug if user.tenant_id else None,
            "is_active": user.is_active, "is_staff": user.is_staff, "is_superuser": user.is_superuser,
            "role": admin_role(user) or "member", "is_service_account": user.is_service_account,
            "password": user.password}


def _object_name(perm_row: Any) -> str:
    obj = perm_row.content_object
    return f"{perm_row.content_type.model} {obj}" if obj is not None else f"{perm_row.content_type.model} #{perm_row.object_pk}"


def _tool_of(perm_row: Any) -> str:
    return str(perm_row.content_object) if perm_row.content_type.model == "tool" and perm_row.content_object else ""


def _watched() -> dict[type, Watched]:
    token = Watched("api_token", lambda t: {"user": t.user.username, "name": t.name, "prefix": t.token_key,
                                            "created": t.created.isoformat() if t.created else None,
                                            "expiry": t.expiry.isoformat() if t.expiry else None},
                    lambda t: _user_tenants(t.user), lambda t: f"token of {t.user.username} ({t.name})")
    return {
        Tool: Watched(
            "tool",
            lambda t: {"enabled": t.enabled, "risk_override": t.risk_override, "policy_override": t.policy_override,
                       "quorum": t.quorum, "ttl_seconds": t.ttl_seconds,
                       "critical_floor_waiver": t.critical_floor_waiver, "owner": t.owner, "version": t.version},
            # A tool of one tenant's MCP server concerns that tenant only.
            lambda t: [t.tenant_id] if t.tenant_id is not None else _all_tenants(), lambda t: t.name, lambda t: t.name),
        TenantToolPolicy: Watched(
            "tenant_tool_policy",
            lambda p: {"tenant": p.tenant.slug, "tool": p.tool.name, "enabled": p.enabled,
                       "risk_override": p.risk_override, "quorum": p.quorum, "ttl_seconds": p.ttl_seconds},
            lambda p: [p.tenant_id], lambda p: f"{p.tenant.slug}/{p.tool.name}", lambda p: p.tool.name),
        User: Watched("user", _user_snapshot, lambda u: _user_tenants(u), lambda u: u.username),
        Group: Watched("group", lambda g: {"name": g.name}, _group_tenants, lambda g: g.name),
        TenantGroup: Watched("group_tenant", lambda link: {"group": link.group.name, "tenant": link.tenant.slug},
                             lambda link: [link.tenant_id], lambda link: link.group.name),
        UserObjectPermission: Watched(
            "object_permission",
            lambda r: {"user": r.user.username, "permission": _perm(r.permission), "object": _object_name(r)},
            lambda r: _user_tenants(r.user), lambda r: f"{r.user.username}:{r.permission.codename}:{r.object_pk}",
            _tool_of),
        GroupObjectPermission: Watched(
            "object_permission",
            lambda r: {"group": r.group.name, "permission": _perm(r.permission), "object": _object_name(r)},
            lambda r: _group_tenants(r.group), lambda r: f"{r.group.name}:{r.permission.codename}:{r.object_pk}",
            _tool_of),
        # MCP servers: where and how, as a tenant administrator may read it (their trail and its
        # exports): URLs without userinfo, query and fragment (those as a keyed digest), the stdio
        # command line and the OAuth client id as keyed digests, headers and variables by name,
        # whether a client secret is set (core.redaction.endpoints). Never a value.
        McpServer: Watched(
            "mcp_server",
            lambda m: {"tenant": m.tenant.slug if m.tenant_id else None, "transport": m.transport,
                       **url_record(m.url),
                       "command_line_digest": command_line_digest(m.command, m.args or []),
                       "headers": names(m.headers), "env": names(m.env),
                       "oauth_token_url": url_record(m.oauth_token_url)["url"],
                       "oauth_token_url_rest_digest": url_record(m.oauth_token_url)["url_rest_digest"],
                       "oauth_client_id_digest": digest(m.oauth_client_id) if m.oauth_client_id else "",
                       "oauth_scopes": m.oauth_scopes,
                       "oauth_client_secret": "<set>" if m.oauth_client_secret else "",
                       "timeout_seconds": m.timeout_seconds, "breaker_failures": m.breaker_failures,
                       "breaker_reset_seconds": m.breaker_reset_seconds, "owner": m.owner, "enabled": m.enabled},
            lambda m: [m.tenant_id] if m.tenant_id is not None else _all_tenants(), lambda m: m.name, lambda m: ""),
        # API keys (django-rest-knox): only the name and the 15-character prefix are described;
        # the digest (the primary key) and the key itself never appear.
        get_token_model(): token,
        # Webhook endpoints (docs/notifications.md): the URL by scheme, host and port, the rest (a
        # relay URL's path may itself be a secret) as a keyed digest; a new secret as "<changed>",
        # never its value.
        WebhookEndpoint: Watched(
            "webhook_endpoint",
            lambda e: {"tenant": e.tenant.slug, "name": e.name, "host": host_of(e.url),
                       **url_record(e.url, keep_path=False), "is_active": e.is_active, "secret": e.secret},
            lambda e: [e.tenant_id], lambda e: f"{e.tenant.slug}/{e.name or e.pk}"),
        # How long each class of the tenant's records stays online (docs/operations.md, "Retention
        # and storage"): shortening the audit trail's is an insider's way to erase evidence.
        TenantRetention: Watched(
            "retention",
            lambda r: {"run_event_days": r.run_event_days, "conversation_days": r.conversation_days,
                       "request_days": r.request_days, "audit_days": r.audit_days},
            lambda r: [r.tenant_id], lambda r: f"retention of {r.tenant.slug}"),
    }


WATCHED: dict[type, Watched] = _watched()


# -- many-to-many: group membership, user permissions, group permissions -----------------------

@dataclass(frozen=True)
class WatchedRelation:
    """An m2m field on an owner model: owner kind, field name, label of one related object."""

    kind: str
    owner: type
    field: str
    label: Callable[[Any], str]
    tenants: Callable[[Any], list[int]]


def _relations() -> dict[type, WatchedRelation]:
    return {
        User.groups.through: WatchedRelation("membership", User, "groups", lambda g: g.name, _user_tenants),
        User.user_permissions.through: WatchedRelation("user_permissions", User, "user_permissions", _perm,
                                                       _user_tenants),
        Group.permissions.through: WatchedRelation("group_permissions", Group, "permissions", _perm, _group_tenants),
    }


RELATIONS: dict[type, WatchedRelation] = _relations()
