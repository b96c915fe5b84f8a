"""Applying an approved control change: re-validated against the current state (the user still a
member of the tenant, the group still the tenant's, the policy unchanged since the proposal...)
and applied through the ordinary models, so the audit receivers and the guards see it like any
other write. Runs inside the caller's transaction (services.control_change_approve), under
`guards.gate.applying(change)`.
"""
from __future__ import annotations

from django.contrib.auth.models import Group
from guardian.shortcuts import assign_perm

from agentplatform.controlplane.bundle_store import bundle_store_approved
from agentplatform.controlplane.errors import ControlChangeStale
from agentplatform.controlplane.guards.grants import group_tenant_id
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.tenancy.models import User
from approvals.independence import is_service_account
from tools.models import TenantToolPolicy, Tool
from tools.policy_catalog import catalog as tool_catalog

Kind = PendingControlChange.Kind


def stale(message: str) -> ControlChangeStale:
    """The error refusing a change the current state no longer allows (`message` says why)."""
    return ControlChangeStale(f"refused: {message} / 已拒绝：状态已变化")


def _user_in_tenant(change: PendingControlChange, user_id: int) -> User:
    user = User.objects.filter(pk=user_id).first()
    if user is None:
        raise stale("the user no longer exists")
    if user.tenant_id != change.tenant_id:
        raise stale(f"{user.username} is no longer a member of the tenant the change was proposed for")
    if user.is_superuser:
        raise stale(f"{user.username} is a platform operator")
    if is_service_account(user):
        raise stale(f"{user.username} is a service account: it never holds approve_tool")
    return user


def _group_of(change: PendingControlChange, group_id: int) -> Group:
    group = Group.objects.filter(pk=group_id).first()
    if group is None:
        raise stale("the group no longer exists")
    if group_tenant_id(group_id) != change.tenant_id:
        raise stale(f"group {group.name} no longer belongs to the tenant the change was proposed for")
    return group


def _tool(change: PendingControlChange, tool_id: int):
    tool = Tool.objects.filter(pk=tool_id).first()
    if tool is None or (tool.tenant_id is not None and tool.tenant_id != change.tenant_id):
        raise stale("the tool is not available to this tenant")
    return tool


def apply_change(change: PendingControlChange) -> None:
    """Re-validate `change` against the current state and apply it. Raises ControlChangeStale."""
    target = change.target
    if change.kind == Kind.USER_GRANT:
        user = _user_in_tenant(change, target["user_id"])
        assign_perm("tools.approve_tool", user, _tool(change, target["tool_id"]))
    elif change.kind == Kind.GROUP_GRANT:
        group = _group_of(change, target["group_id"])
        tool = _tool(change, target["tool_id"])
        members = sorted(User.objects.filter(groups=group).values_list("username", flat=True))
        if members != sorted(change.new_state.get("members") or []):
            raise stale(f"the members of {group.name} changed since the proposal (now: {', '.join(members)})")
        assign_perm("tools.approve_tool", group, tool)
    elif change.kind == Kind.MEMBERSHIP:
        user = _user_in_tenant(change, target["user_id"])
        group = _group_of(change, target["group_id"])
        user.groups.add(group)
    elif change.kind == Kind.REACTIVATION:
        user = _user_in_tenant(change, target["user_id"])
        if user.is_active:
            raise stale(f"{user.username} is already active")
        user.is_active = True
        user.save(update_fields=["is_active"])
    elif change.kind == Kind.ADMIN:
        fields = target["fields"]
        user = User.objects.filter(pk=target["user_id"]).first()
        if "is_superuser" not in fields:
            user = _user_in_tenant(change, target["user_id"])
        elif user is None or is_service_account(user):
            raise stale("the account no longer exists or is a service account")
        if not user.is_active or any(getattr(user, name) for name in fields):
            raise stale(f"{user.username} changed since the proposal (inactive, or already has that status)")
        for name in fields:
            setattr(user, name, True)
        user.save(update_fields=list(fields))
    elif change.kind == Kind.TOOL_POLICY:
        tool = Tool.objects.filter(pk=target["tool_id"]).first()
        if tool is None:
            raise stale("the tool no longer exists")
        if any(getattr(tool, k) != v for k, v in change.old_state.items()):
            raise stale(f"the policy of {tool.name} was changed since the proposal")
        for name, value in target["fields"].items():
            setattr(tool, name, value)
        tool.clean()
        tool.save()
    elif change.kind == Kind.TENANT_POLICY:
        policy = TenantToolPolicy.objects.filter(pk=target["policy_id"], tenant_id=change.tenant_id).first()
        if policy is None:
            raise stale("the tenant's policy entry no longer exists")
        if any(getattr(policy, k) != v for k, v in change.old_state.items()):
            raise stale(f"the {policy.tool.name} policy of {policy.tenant.slug} was changed since the proposal")
        if target["action"] == "delete":
            policy.delete()
        else:
            for name, value in target["fields"].items():
                setattr(policy, name, value)
            policy.clean()
            policy.save()
    elif change.kind == Kind.POLICY_BUNDLE:
        bundle_store_approved(change, tool_catalog(change.tenant_id))
    else:  # pragma: no cover - every kind is handled above
        raise stale(f"unknown kind {change.kind}")
