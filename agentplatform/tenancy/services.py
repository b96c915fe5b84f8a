"""Writes of the tenancy app that more than one entry point needs (the admin, the demo seed)."""
from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import transaction

from agentplatform.tenancy.models import TenantGroup

# Set on a Group instance before its first save when the group is created for one tenant: its
# TenantGroup row does not exist yet when the control-plane audit receiver describes the creation,
# and a group without one counts as platform-wide (every tenant's trail). The receiver reads it.
AUDIT_TENANT_ATTR = "_audit_tenant_id"


def mark_group_tenant(group: Group, tenant_id: int | None) -> Group:
    """Tell the control-plane audit which tenant an unsaved `group` is being created for (None:
    platform-wide), so its creation is written to that tenant's trail only. Returns `group`."""
    setattr(group, AUDIT_TENANT_ATTR, tenant_id)
    return group


@transaction.atomic
def tenant_group_create(*, name: str, tenant_id: int) -> Group:
    """Create the group `name` belonging to tenant `tenant_id` (its TenantGroup row) in one
    transaction, audited in that tenant's trail only. Returns the group. Raises IntegrityError
    when a group of that name exists (group names are unique platform-wide, Django's auth)."""
    group = mark_group_tenant(Group(name=name), tenant_id)
    group.save()
    TenantGroup.objects.create(group=group, tenant_id=tenant_id)
    return group
