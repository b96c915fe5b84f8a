"""Every control-plane change becomes an AuditEvent (decision CONTROL_CHANGE) in the transaction
of the change, with actor, tenant, object and old -> new values, whoever makes it and wherever.

Why model signals (docs/roles.md, "Where the audit hook lives"): the control plane is changed by
the admin, by guardian's object-permission screens, by guardian's `assign_perm`/`remove_perm`, by
the seed, by services and by anyone in `manage.py shell`. A service layer would only see the
callers that remember to use it; guardian's own views and shortcuts would bypass it. Every one of
those paths goes through `Model.save()`, `delete()` or an m2m manager, which send
pre/post_save, post_delete and m2m_changed, so one receiver per model covers them all, and the
receiver runs inside the caller's transaction (the admin's views, our services and the guardian
views we wrap are atomic). A trigger-based library (django-pghistory) would also see raw SQL, but
it writes its own event tables, not our append-only, hash-chained AuditEvent; and the actor would
still have to be passed in from Python. What signals do not see: `QuerySet.update()` and
`bulk_create()` on these models, and raw SQL; no code of ours uses those on control-plane models
(tests/controlplane/test_audit_hooks.py guards the paths we use).

Rows are written through `audit.events.control_change_recorded`, never raw ORM.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from django.contrib.auth.models import Group, Permission
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from agentplatform.tenancy import service_accounts
from agentplatform.tenancy.actor import current_actor, current_channel
from agentplatform.tenancy.models import Tenant, TenantGroup, User
from agentplatform.tenancy.roles import admin_role
from agentplatform.tenancy.services import AUDIT_TENANT_ATTR
from audit import events
from audit.models import AuditEvent

SECRET = "<changed>"


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
    from guardian.models import GroupObjectPermission, UserObjectPermission

    from agentplatform.api.models import ApiKey
    from agentplatform.endpoint_redaction import command_line_digest, digest, names, url_record
    from mcp_sources.models import McpServer
    from notifications.models import WebhookEndpoint
    from notifications.urlcheck import host_of
    from tools.models import TenantToolPolicy, Tool

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
            # A tool of one tenant's MCP server concerns that tenant only (issue 14 item 5).
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
        # whether a client secret is set (agentplatform.endpoint_redaction). Never a value.
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
        ApiKey: token,
        # Webhook endpoints (docs/notifications.md): the URL by scheme, host and port, the rest (a
        # relay URL's path may itself be a secret) as a keyed digest; a new secret as "<changed>",
        # never its value.
        WebhookEndpoint: Watched(
            "webhook_endpoint",
            lambda e: {"tenant": e.tenant.slug, "name": e.name, "host": host_of(e.url),
                       **url_record(e.url, keep_path=False), "is_active": e.is_active, "secret": e.secret},
            lambda e: [e.tenant_id], lambda e: f"{e.tenant.slug}/{e.name or e.pk}"),
    }


WATCHED: dict[type, Watched] = {}


SECRET_KEYS = frozenset({"password", "secret"})  # audited as "<changed>", never their value


def _secret_safe(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None or not SECRET_KEYS & set(values):
        return values
    return {k: v for k, v in values.items() if k not in SECRET_KEYS}


def control_change(*, kind: str, verb: str, ident: str, tenants: list[int], old: dict | None, new: dict | None,
                   tool_name: str = "") -> list[AuditEvent]:
    """Write one CONTROL_CHANGE AuditEvent per affected tenant, in the caller's transaction.

    verb: CREATED, CHANGED or DELETED (the row's status). old/new: the audited values before and
    after (None for created/deleted); only changed keys are kept for CHANGED, and a password
    change is recorded as "<changed>", never its hash. Returns the rows written (none when
    nothing audited changed). Raises DatabaseError when the write fails, which rolls the change
    back with it (fail closed).
    """
    if verb == "CHANGED":
        changed = [k for k in (new or {}) if (old or {}).get(k) != new[k]]
        if not changed:
            return []
        old = {k: (SECRET if k in SECRET_KEYS else old.get(k)) for k in changed}
        new = {k: (SECRET if k in SECRET_KEYS else new[k]) for k in changed}
    else:
        old, new = _secret_safe(old), _secret_safe(new)
    actor = current_actor()
    summary = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new) if verb == "CHANGED" else ""
    message = f"{kind} {ident} {verb.lower()}" + (f": {summary}" if summary else "")
    details = {"object": {"type": kind, "id": ident}, "old": old, "new": new,
               "actor_role": _actor_role(actor),
               "scope": "platform" if len(tenants) != 1 else "tenant"}
    return [events.control_change_recorded(tenant_id=tenant_id, status=verb,
                          actor_id=getattr(actor, "pk", None), tool_name=tool_name, masked_arguments=details,
                          message=message)
            for tenant_id in tenants]


def _actor_role(actor: Any) -> str | None:
    """The role named in a row: the actor's administrative role (None for a member); without an actor,
    the channel that said where the change came from (`tenancy.actor.acting_via`, e.g. "shell
    (manage.py issue_api_token)"), else the generic system label."""
    if actor is not None:
        return admin_role(actor)
    return current_channel() or "system (no request: shell, task or seed)"


def _pre_save(sender, instance, raw=False, **kwargs) -> None:
    watched = WATCHED[sender]
    instance._control_old = None
    if not raw and not instance._state.adding and instance.pk is not None:
        old = sender._default_manager.filter(pk=instance.pk).first()
        if old is not None:
            instance._control_old = (watched.snapshot(old), watched.tenants(old))


def _post_save(sender, instance, created, raw=False, **kwargs) -> None:
    if raw:
        return  # fixtures loading
    watched = WATCHED[sender]
    new = watched.snapshot(instance)
    before = getattr(instance, "_control_old", None)
    tenants = watched.tenants(instance)
    if created or before is None:
        control_change(kind=watched.kind, verb="CREATED", ident=watched.ident(instance), tenants=tenants,
                       old=None, new=new, tool_name=watched.tool(instance))
        return
    old, old_tenants = before
    # a member moved between tenants: both tenants see the change
    affected = sorted(set(tenants) | set(old_tenants))
    control_change(kind=watched.kind, verb="CHANGED", ident=watched.ident(instance), tenants=affected,
                   old=old, new=new, tool_name=watched.tool(instance))
    instance._control_old = (new, tenants)


def _pre_delete_snapshot(sender, instance, **kwargs) -> None:
    watched = WATCHED[sender]
    instance._control_deleted = (watched.snapshot(instance), watched.tenants(instance), watched.ident(instance),
                                 watched.tool(instance))


def _post_delete(sender, instance, **kwargs) -> None:
    watched = WATCHED[sender]
    snapshot, tenants, ident, tool = getattr(instance, "_control_deleted", None) or (
        watched.snapshot(instance), watched.tenants(instance), watched.ident(instance), watched.tool(instance))
    tenants = [t for t in tenants if Tenant.objects.filter(pk=t).exists()]
    control_change(kind=watched.kind, verb="DELETED", ident=ident, tenants=tenants, old=snapshot, new=None,
                   tool_name=tool)


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


RELATIONS: dict[type, WatchedRelation] = {}


def _related_labels(relation: WatchedRelation, owner: Any) -> list[str]:
    related = getattr(owner, relation.field).all()
    if relation.field != "groups":
        related = related.select_related("content_type")
    return sorted(relation.label(obj) for obj in related)


def _m2m_owners(relation: WatchedRelation, instance, reverse: bool, pk_set) -> list[Any]:
    if not reverse:
        return [instance]
    if pk_set is None:  # reverse clear: every owner currently related
        accessor = relation.owner._meta.get_field(relation.field).related_query_name()
        return list(relation.owner._default_manager.filter(**{accessor: instance}))
    return list(relation.owner._default_manager.filter(pk__in=pk_set))


def _m2m_changed(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    relation = RELATIONS[sender]
    if action.startswith("pre_"):
        owners = _m2m_owners(relation, instance, reverse, pk_set)
        instance._control_m2m = {(sender, o.pk): (o, _related_labels(relation, o)) for o in owners}
        return
    before = getattr(instance, "_control_m2m", {})
    for (through, _pk), (owner, old) in list(before.items()):
        if through is not sender:
            continue
        new = _related_labels(relation, type(owner)._default_manager.get(pk=owner.pk))  # no prefetch cache
        name = getattr(owner, "username", None) or getattr(owner, "name", str(owner.pk))
        control_change(kind=relation.kind, verb="CHANGED", ident=name, tenants=relation.tenants(owner),
                       old={relation.field: old}, new={relation.field: new})
    instance._control_m2m = {}


# -- service accounts are never approvers (agentplatform.tenancy.service_accounts) ---------------

def _service_account_rules_on_save(sender, instance, raw=False, **kwargs) -> None:
    """Refuse a save that would make a service account an approver (raises ServiceAccountRefused,
    a domain error, inside the caller's transaction)."""
    if raw:
        return
    from guardian.models import GroupObjectPermission, UserObjectPermission

    if sender is User:
        service_accounts.check_user_save(instance)
    elif sender is UserObjectPermission:
        service_accounts.check_user_object_grant(instance)
    elif sender is GroupObjectPermission:
        service_accounts.check_group_object_grant(instance)


def _service_account_rules_on_m2m(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    """Refuse adding a service account to a group that holds approve_tool, or approve_tool to a
    service account or a group with one, from either side of the relation."""
    if action != "pre_add" or not pk_set:
        return
    owners, related = (set(pk_set), {instance.pk}) if reverse else ({instance.pk}, set(pk_set))
    if sender is User.groups.through:
        service_accounts.check_memberships(user_ids=owners, group_ids=related)
    elif sender is User.user_permissions.through:
        service_accounts.check_user_permissions(user_ids=owners, permission_ids=related)
    elif sender is Group.permissions.through:
        service_accounts.check_group_permissions(group_ids=owners, permission_ids=related)


def _connect_service_account_rules() -> None:
    from guardian.models import GroupObjectPermission, UserObjectPermission

    for model in (User, UserObjectPermission, GroupObjectPermission):
        pre_save.connect(_service_account_rules_on_save, sender=model,
                         dispatch_uid=f"controlplane-service-accounts-{model._meta.label_lower}")
    for through in (User.groups.through, User.user_permissions.through, Group.permissions.through):
        m2m_changed.connect(_service_account_rules_on_m2m, sender=through,
                            dispatch_uid=f"controlplane-service-accounts-{through._meta.label_lower}")


def connect() -> None:
    """Connect the receivers for every watched model and relation (AppConfig.ready)."""
    from django.db.models.signals import pre_delete

    _connect_service_account_rules()
    WATCHED.update(_watched())
    RELATIONS.update(_relations())
    for model in WATCHED:
        uid = f"controlplane-{model._meta.label_lower}"
        pre_save.connect(_pre_save, sender=model, dispatch_uid=uid + "-pre")
        post_save.connect(_post_save, sender=model, dispatch_uid=uid + "-post")
        pre_delete.connect(_pre_delete_snapshot, sender=model, dispatch_uid=uid + "-predel")
        post_delete.connect(_post_delete, sender=model, dispatch_uid=uid + "-del")
    for through in RELATIONS:
        m2m_changed.connect(_m2m_changed, sender=through, dispatch_uid=f"controlplane-{through._meta.label_lower}")
