"""Dual control at the model layer: every path that would empower an approver or loosen a
HIGH/CRITICAL tool's policy passes here (docs/roles.md, "Trust model").

Guarded changes: a `tools.approve_tool` object permission given to a user or a group (guardian's
`assign_perm`, its admin pages, a row saved by hand), a member added to a group holding it (from
either side of the many-to-many), an account holding it re-activated (directly or through a
group), an account made staff or superuser (or an administrator re-activated), and a Tool or
TenantToolPolicy change that makes a HIGH/CRITICAL tool's effective policy looser (tools.policy).

Who may make them:
- code applying an approved control change (`applying(change)`, set only by
  `services.control_change_approve`): applied, its standing recorded with the change's people;
- code with no acting person (`manage.py shell`, the demo seed, migrations, Celery): applied
  directly and audited as such ("system (no request: shell, task or seed)"), its standing recorded
  with no proposer. Someone with a shell on the server is outside the tenant model;
- anyone else, administrator or operator: refused with ControlChangeRequired, before anything is
  written; the admin turns it into a proposal (agentplatform.controlplane.middleware).

Tightening (revoking, removing a member, deactivating, a stricter policy) is never guarded.
What signals do not see (QuerySet.update, bulk_create, a membership's through row saved by hand,
which Django saves without signals, raw SQL) is not used by our code on these models
(agentplatform.controlplane.receivers says the same for the audit): it is a shell's act.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

from agentplatform import clock
from agentplatform.controlplane.errors import ControlChangeRequired
from agentplatform.tenancy.actor import current_actor
from agentplatform.tenancy.models import TenantGroup, User

APPROVE = "approve_tool"
HIGH_RISKS = ("HIGH", "CRITICAL")
POLICY_FIELDS_TOOL = ("risk_override", "policy_override", "quorum", "ttl_seconds", "critical_floor_waiver")
POLICY_FIELDS_TENANT = ("risk_override", "quorum", "ttl_seconds")

_applying: ContextVar[Any] = ContextVar("control_change_applying", default=None)


@contextlib.contextmanager
def applying(change: Any) -> Iterator[None]:
    """Mark the writes inside the block as the application of the approved `change` (a
    PendingControlChange): the guards let them through and record their standing with the
    change's proposer and approver. Only services.control_change_approve uses it."""
    token = _applying.set(change)
    try:
        yield
    finally:
        _applying.reset(token)


@dataclass
class Gated:
    """One guarded change a person attempted: what a PendingControlChange would hold.

    kind: PendingControlChange.Kind value. tenant_id: the tenant concerned (None: platform-wide).
    target: ids to apply. old / new: what people are shown. summary: one line.
    """

    kind: str
    tenant_id: int | None
    target: dict[str, Any]
    old: dict[str, Any]
    new: dict[str, Any]
    summary: str
    key: str = field(default="")

    def __post_init__(self) -> None:
        if not self.key:
            ids = ":".join(f"{k}={self.target[k]}" for k in sorted(self.target) if k != "fields")
            self.key = f"{self.kind}:{ids}"[:200]


def _gate(gated: list[Gated]) -> None:
    """Let `gated` through when an approved change is being applied or no person acts; else refuse."""
    if not gated or _applying.get() is not None or current_actor() is None:
        return
    raise ControlChangeRequired(gated)


# -- who holds approve_tool --------------------------------------------------------------------

def _tool_ct_id() -> int:
    from django.contrib.contenttypes.models import ContentType

    from tools.models import Tool

    return ContentType.objects.get_for_model(Tool).pk


def _is_approve_row(row: Any) -> bool:
    permission = row.permission
    return permission.codename == APPROVE and permission.content_type.app_label == "tools" \
        and permission.content_type.model == "tool"


def group_approves(group_id: int) -> list[str]:
    """Names of the tools group `group_id` holds approve_tool on."""
    from guardian.models import GroupObjectPermission

    from tools.models import Tool

    pks = GroupObjectPermission.objects.filter(group_id=group_id, permission__codename=APPROVE,
                                               content_type_id=_tool_ct_id()).values_list("object_pk", flat=True)
    return sorted(Tool.objects.filter(pk__in=[int(p) for p in pks]).values_list("name", flat=True))


def user_approves(user_id: int) -> bool:
    """Whether user `user_id` holds approve_tool on any tool, directly or through a group."""
    from guardian.models import GroupObjectPermission, UserObjectPermission

    ct = _tool_ct_id()
    return (UserObjectPermission.objects.filter(user_id=user_id, permission__codename=APPROVE,
                                                content_type_id=ct).exists()
            or GroupObjectPermission.objects.filter(group__user=user_id, permission__codename=APPROVE,
                                                    content_type_id=ct).exists())


def group_tenant_id(group_id: int) -> int | None:
    """The tenant a group belongs to (None: platform-wide)."""
    return TenantGroup.objects.filter(group_id=group_id).values_list("tenant_id", flat=True).first()


def _tool_name(object_pk: Any) -> str:
    from tools.models import Tool

    return Tool.objects.filter(pk=int(object_pk)).values_list("name", flat=True).first() or f"tool #{object_pk}"


# -- standing provenance -----------------------------------------------------------------------

def record_standing(*, kind: str, user_id: int | None = None, group_id: int | None = None,
                    tool_id: int | None = None) -> None:
    """Record (or renew) when one piece of standing became effective and who it came from: the
    approved change being applied, else the acting person (a change that needed nobody else),
    else nobody (shell, seed). Call in the transaction of the grant."""
    from agentplatform.controlplane.models import StandingSource

    change = _applying.get()
    actor = current_actor()
    if change is not None:
        people = {"change": change, "proposer_id": change.proposed_by_id, "approver_id": change.decided_by_id,
                  "applied_by": "control change"}
    elif actor is not None:
        people = {"change": None, "proposer_id": actor.pk, "approver_id": None, "applied_by": "administrator"}
    else:
        people = {"change": None, "proposer_id": None, "approver_id": None, "applied_by": "shell/seed"}
    key = f"{kind}:{user_id or ''}:{group_id or ''}:{tool_id or ''}"
    StandingSource.objects.update_or_create(
        key=key, defaults={"kind": kind, "user_id": user_id, "group_id": group_id, "tool_id": tool_id,
                           "effective_at": clock.now(), **people})


# -- object permissions: approve_tool to a user or a group ---------------------------------------

def _old_row(sender, instance) -> Any:
    if instance._state.adding or instance.pk is None:
        return None
    return sender._default_manager.filter(pk=instance.pk).first()


def _perm_pre_save(sender, instance, raw=False, **kwargs) -> None:
    if raw or not _is_approve_row(instance):
        return
    old = _old_row(sender, instance)
    subject = "user_id" if hasattr(instance, "user_id") else "group_id"
    if old is not None and _is_approve_row(old) and old.object_pk == instance.object_pk \
            and getattr(old, subject) == getattr(instance, subject):
        return  # the same grant saved again
    tool = _tool_name(instance.object_pk)
    if subject == "user_id":
        user = User.objects.filter(pk=instance.user_id).first()
        _gate([Gated("USER_GRANT", getattr(user, "tenant_id", None),
                     {"user_id": instance.user_id, "tool_id": int(instance.object_pk)},
                     {"approve_tool": False}, {"approve_tool": True, "tool": tool, "user": getattr(user, "username", "")},
                     f"grant approve_tool on {tool} to {getattr(user, 'username', instance.user_id)}")])
    else:
        group = Group.objects.filter(pk=instance.group_id).first()
        members = sorted(User.objects.filter(groups=instance.group_id).values_list("username", flat=True))
        _gate([Gated("GROUP_GRANT", group_tenant_id(instance.group_id),
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


# -- membership of a group holding approve_tool -----------------------------------------------

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
        _gate([g for g in (_membership_gated(u, gr) for u, gr in pairs) if g is not None])
        instance._standing_pairs = pairs
    elif action == "post_add":
        for user_id, group_id in getattr(instance, "_standing_pairs", None) or _pairs(instance, reverse, pk_set):
            record_standing(kind="MEMBERSHIP", user_id=user_id, group_id=group_id)
        instance._standing_pairs = None


# -- administrators, and re-activation of an approver or an administrator -------------------------

ADMIN_FIELDS = ("is_staff", "is_superuser")


def _new_administrator(instance: User) -> None:
    """A person creating an account that is born staff or superuser, or giving a tenant to a staff
    account without one (which makes it that tenant's administrator at once): refused (there is
    no administrator yet to propose the change for). Create it, or give the tenant, without staff
    status, then propose making it an administrator."""
    if _applying.get() is None and current_actor() is not None:
        from agentplatform.controlplane.errors import ControlChangeForbidden

        raise ControlChangeForbidden("create the account without staff or superuser status, then propose making it "
                                     "an administrator (a second administrator approves) "
                                     "/ 请先创建普通账号，再提议设为管理员")


def _admin_gated(instance: User, stored: dict[str, Any]) -> Gated | None:
    """Making `instance` staff (a tenant administrator) or a superuser (a platform operator): a
    second administrator would be the second person of every later change, so one person alone
    could approve their own proposals with an account they made. A superuser is platform-wide
    (tenant None: another operator decides); staff concerns the account's tenant."""
    raised = {name: True for name in ADMIN_FIELDS if getattr(instance, name) and not stored[name]}
    if not raised or not instance.is_active:
        return None
    operator = "is_superuser" in raised
    return Gated("ADMIN", None if operator else instance.tenant_id, {"user_id": instance.pk, "fields": raised},
                 {name: False for name in raised}, {**raised, "user": instance.username},
                 f"make {instance.username} " + ("a platform operator" if operator else "a tenant administrator"))


def _user_pre_save(sender, instance, raw=False, **kwargs) -> None:
    instance._reactivated = False
    if raw:
        return
    if instance._state.adding or instance.pk is None:
        if instance.is_staff or instance.is_superuser:
            _new_administrator(instance)
        return
    stored = User.objects.filter(pk=instance.pk).values("is_active", "tenant_id", *ADMIN_FIELDS).first()
    if stored is None:
        return
    if stored["tenant_id"] is None and instance.tenant_id is not None and instance.is_staff \
            and not instance.is_superuser:
        _new_administrator(instance)  # staff without a tenant given one: a tenant administrator at once
    gated = []
    if instance.is_active and stored["is_active"] is False:
        instance._reactivated = True
        if user_approves(instance.pk):
            gated.append(Gated("REACTIVATION", instance.tenant_id, {"user_id": instance.pk}, {"is_active": False},
                               {"is_active": True}, f"re-activate {instance.username}, who holds approve_tool"))
        elif any(stored[name] and getattr(instance, name) for name in ADMIN_FIELDS):
            gated.append(Gated("REACTIVATION", instance.tenant_id, {"user_id": instance.pk}, {"is_active": False},
                               {"is_active": True}, f"re-activate {instance.username}, an administrator"))
        stored = {**stored, "is_active": True}
    admin = _admin_gated(instance, stored)
    if admin is not None:
        gated.append(admin)
    _gate(gated)


def _user_post_save(sender, instance, created, raw=False, **kwargs) -> None:
    if not raw and getattr(instance, "_reactivated", False):
        record_standing(kind="ACTIVATION", user_id=instance.pk)
        instance._reactivated = False


# -- loosening a HIGH/CRITICAL tool's effective policy ---------------------------------------------

def _looser(old: Any, new: Any) -> list[str]:
    """What of EffectivePolicy `new` is looser than `old` (empty: as strict or stricter)."""
    from tools.policy import POLICY_ORDER, RISK_ORDER

    why = []
    if RISK_ORDER.index(new.risk) < RISK_ORDER.index(old.risk):
        why.append(f"risk {old.risk} -> {new.risk}")
    if POLICY_ORDER.index(new.policy) < POLICY_ORDER.index(old.policy):
        why.append(f"policy {old.policy} -> {new.policy}")
    if new.policy == old.policy == "APPROVERS" and new.quorum < old.quorum:
        why.append(f"quorum {old.quorum} -> {new.quorum}")
    if new.ttl_seconds > old.ttl_seconds:
        why.append(f"TTL {old.ttl_seconds} s -> {new.ttl_seconds} s")
    return why


def _fields(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def _tool_pre_save(sender, instance, raw=False, **kwargs) -> None:
    from tools.policy import global_policy
    from tools.registry import registry

    if raw:
        return
    old = _old_row(sender, instance)
    spec = registry.get(instance.name)
    if old is None or spec is None:
        return
    before, after = global_policy(spec, old), global_policy(spec, instance)
    if spec.risk not in HIGH_RISKS and before.risk not in HIGH_RISKS:
        return
    why = _looser(before, after)
    if why:
        old_fields, new_fields = _fields(old, POLICY_FIELDS_TOOL), _fields(instance, POLICY_FIELDS_TOOL)
        changed = {k: v for k, v in new_fields.items() if old_fields[k] != v}
        _gate([Gated("TOOL_POLICY", instance.tenant_id, {"tool_id": instance.pk, "fields": changed},
                     {k: old_fields[k] for k in changed}, changed,
                     f"loosen {instance.name} for every tenant: {', '.join(why)}", key=f"TOOL_POLICY:{instance.pk}")])


def _tenant_policy_gated(old: Any, new: Any | None) -> Gated | None:
    from tools.policy import effective_policy
    from tools.registry import registry

    tool = old.tool
    spec = registry.get(tool.name)
    if spec is None:
        return None
    before, after = effective_policy(spec, tool, old), effective_policy(spec, tool, new)
    if spec.risk not in HIGH_RISKS and before.risk not in HIGH_RISKS:
        return None
    why = _looser(before, after)
    if not why:
        return None
    old_fields = _fields(old, POLICY_FIELDS_TENANT)
    if new is None:
        return Gated("TENANT_POLICY", old.tenant_id, {"policy_id": old.pk, "action": "delete"}, old_fields,
                     {"deleted": True}, f"delete the {tool.name} policy of {old.tenant.slug}: {', '.join(why)}",
                     key=f"TENANT_POLICY:{old.pk}")
    changed = {k: v for k, v in _fields(new, POLICY_FIELDS_TENANT).items() if old_fields[k] != v}
    return Gated("TENANT_POLICY", old.tenant_id, {"policy_id": old.pk, "action": "change", "fields": changed},
                 {k: old_fields[k] for k in changed}, changed,
                 f"loosen {tool.name} in {old.tenant.slug}: {', '.join(why)}", key=f"TENANT_POLICY:{old.pk}")


def _tenant_policy_pre_save(sender, instance, raw=False, **kwargs) -> None:
    if raw:
        return
    old = _old_row(sender, instance)
    if old is not None:
        gated = _tenant_policy_gated(old, instance)
        _gate([gated] if gated else [])


def _tenant_policy_pre_delete(sender, instance, origin=None, **kwargs) -> None:
    # A cascade from deleting the tool or the tenant itself ends the policy with its subject.
    if getattr(origin, "model", type(origin)) is not sender:
        return
    gated = _tenant_policy_gated(instance, None)
    _gate([gated] if gated else [])


def connect() -> None:
    """Connect the guards (AppConfig.ready)."""
    from guardian.models import GroupObjectPermission, UserObjectPermission

    from tools.models import TenantToolPolicy, Tool

    for model in (UserObjectPermission, GroupObjectPermission):
        uid = f"dualcontrol-{model._meta.label_lower}"
        pre_save.connect(_perm_pre_save, sender=model, dispatch_uid=uid + "-pre")
        post_save.connect(_perm_post_save, sender=model, dispatch_uid=uid + "-post")
    m2m_changed.connect(_membership_changed, sender=User.groups.through, dispatch_uid="dualcontrol-membership")
    pre_save.connect(_user_pre_save, sender=User, dispatch_uid="dualcontrol-user-pre")
    post_save.connect(_user_post_save, sender=User, dispatch_uid="dualcontrol-user-post")
    pre_save.connect(_tool_pre_save, sender=Tool, dispatch_uid="dualcontrol-tool-pre")
    pre_save.connect(_tenant_policy_pre_save, sender=TenantToolPolicy, dispatch_uid="dualcontrol-tenantpolicy-pre")
    pre_delete.connect(_tenant_policy_pre_delete, sender=TenantToolPolicy,
                       dispatch_uid="dualcontrol-tenantpolicy-del")
