"""The receivers that turn a change of a watched model or relation (`watched`) into control-plane
rows (`changes.control_change`): created, changed (only what changed; a tenant move concerns both
tenants) and deleted objects, and the before/after labels of a many-to-many change. They run
inside the caller's transaction: a failed audit write rolls the change back with it.
"""
from __future__ import annotations

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save

from agentplatform.controlplane.receivers.changes import control_change
from agentplatform.controlplane.receivers.watched import RELATIONS, WATCHED, WatchedRelation
from agentplatform.tenancy.models import Tenant


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


def connect() -> None:
    """Connect the receivers for every watched model and relation (AppConfig.ready)."""
    for model in WATCHED:
        uid = f"controlplane-{model._meta.label_lower}"
        pre_save.connect(_pre_save, sender=model, dispatch_uid=uid + "-pre")
        post_save.connect(_post_save, sender=model, dispatch_uid=uid + "-post")
        pre_delete.connect(_pre_delete_snapshot, sender=model, dispatch_uid=uid + "-predel")
        post_delete.connect(_post_delete, sender=model, dispatch_uid=uid + "-del")
    for through in RELATIONS:
        m2m_changed.connect(_m2m_changed, sender=through, dispatch_uid=f"controlplane-{through._meta.label_lower}")
