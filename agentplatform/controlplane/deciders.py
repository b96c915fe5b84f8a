"""Who may propose and who may decide a pending control change: an administrator of the tenant
concerned or a platform operator; never the proposer approving their own change, never a user the
change would empower. Reads only; no transaction of its own.
"""
from __future__ import annotations

from typing import Any

from agentplatform.controlplane.errors import ControlChangeForbidden, ControlChangeNotFound
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role

Kind = PendingControlChange.Kind


def may_administer(user: Any, tenant_id: int | None) -> bool:
    """Whether `user` administers tenant `tenant_id` (a platform operator administers every tenant
    and the platform itself, `tenant_id` None)."""
    role = admin_role(user)
    if role == PLATFORM_OPERATOR:
        return True
    return role == TENANT_ADMINISTRATOR and tenant_id is not None and user.tenant_id == tenant_id


def _beneficiaries(change: PendingControlChange) -> set[int]:
    """Users the change would empower: they never decide it."""
    target = change.target
    if change.kind in (Kind.USER_GRANT, Kind.MEMBERSHIP, Kind.REACTIVATION, Kind.ADMIN):
        return {target["user_id"]}
    if change.kind == Kind.GROUP_GRANT:
        return set(User.objects.filter(groups=target["group_id"]).values_list("pk", flat=True))
    return set()


def check_decider(change: PendingControlChange, decider: User, *, approving: bool) -> None:
    """Raise unless `decider` may decide `change`: ControlChangeNotFound when it is not theirs to see
    (another tenant's, or they administer nothing); when `approving`, ControlChangeForbidden for
    its proposer and for a user it would empower. Any administrator of the tenant may reject."""
    role = admin_role(decider)
    if role == TENANT_ADMINISTRATOR and (change.tenant_id is None or change.tenant_id != decider.tenant_id):
        raise ControlChangeNotFound("unknown control change")  # another tenant's: not found
    if role not in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR):
        raise ControlChangeNotFound("unknown control change")
    if not approving:
        return  # any administrator of the tenant, the proposer included, may reject (withdraw)
    if decider.pk == change.proposed_by_id:
        raise ControlChangeForbidden("the proposer never approves their own change: a second administrator of "
                                     "the tenant or a platform operator must / 提议人不能批准自己的变更")
    if decider.pk in _beneficiaries(change):
        raise ControlChangeForbidden("this change would give you approve_tool: someone else must approve it "
                                     "/ 此变更授予您审批权，须由他人批准")
