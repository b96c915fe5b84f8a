"""Service accounts are never approvers (agentplatform.tenancy.service_accounts): receivers that
refuse, inside the caller's transaction, a save or a many-to-many change that would give one
approve_tool, from either side of the relation."""
from __future__ import annotations

from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, pre_save
from guardian.models import GroupObjectPermission, UserObjectPermission

from agentplatform.tenancy import service_accounts
from agentplatform.tenancy.models import User


def _service_account_rules_on_save(sender, instance, raw=False, **kwargs) -> None:
    """Refuse a save that would make a service account an approver (raises ServiceAccountRefused,
    a domain error, inside the caller's transaction)."""
    if raw:
        return
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


def connect() -> None:
    """Connect these receivers (AppConfig.ready), before the audit's: a refused change writes no row."""
    for model in (User, UserObjectPermission, GroupObjectPermission):
        pre_save.connect(_service_account_rules_on_save, sender=model,
                         dispatch_uid=f"controlplane-service-accounts-{model._meta.label_lower}")
    for through in (User.groups.through, User.user_permissions.through, Group.permissions.through):
        m2m_changed.connect(_service_account_rules_on_m2m, sender=through,
                            dispatch_uid=f"controlplane-service-accounts-{through._meta.label_lower}")
