"""Give or take one role (agentplatform.controlplane.roles) from one member: the admin's Roles page.

Each role is set through the ordinary models, under the same rules as every other path: a
requester gets `use_tool` on the tools enabled for the tenant and their permissions (only those
the administrator holds, tools.access_grants); an approver joins the tenant's approvers group and
an administrator becomes staff, both guarded by dual control (agentplatform.controlplane.guards):
the attempt is rolled back and becomes a pending control change a second administrator decides
(services.control_change_propose); an auditor joins the `<tenant>-auditors` group (created with
AUDITOR_PERMISSION when missing, by an administrator who holds it). Taking a role away is never
guarded. Each write and its control-plane audit rows commit together.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils.translation import gettext as _
from guardian.models import GroupObjectPermission, UserObjectPermission

from agentplatform.controlplane.errors import ControlChangeRequired
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.roles import (ADMINISTRATOR, APPROVER, AUDITOR, REQUESTER, ROLES,
                                              approvers_group_name, auditors_group_name, roles_held,
                                              tenant_approver_groups, tenant_auditor_groups)
from agentplatform.controlplane.services import control_changes_propose
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.admin_scope import held_permissions
from agentplatform.tenancy.models import TenantGroup, User
from agentplatform.tenancy.roles import AUDITOR_PERMISSION, can_administer_user
from agentplatform.tenancy.services import tenant_group_create
from core import clock
from core.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from tools.access_grants import access_grant_inline
from tools.models import TenantToolPolicy, Tool


class RoleRefused(PermissionDeniedError):
    """This role cannot be given or taken this way (the message says why and who can)."""

    code = "ROLE_REFUSED"


@dataclass
class RoleOutcome:
    """What `role_set` did. outcome: "granted", "revoked" or "proposed" (a pending control change
    waits for a second administrator: `changes`); `notes`: sentences about parts not done."""

    role: str
    outcome: str
    notes: list[str] = field(default_factory=list)
    changes: list[PendingControlChange] = field(default_factory=list)


def pending_role_changes(user: User) -> list[PendingControlChange]:
    """The control changes still waiting for a second person that would empower `user`."""
    return list(PendingControlChange.objects.filter(status=PendingControlChange.Status.PENDING,
                                                    expires_at__gt=clock.now(), target__user_id=user.pk)
                .order_by("proposed_at"))


# -- grant ----------------------------------------------------------------------------------------

def _grant_requester(actor: User, user: User, outcome: RoleOutcome) -> None:
    offered = Tool.objects.filter(
        registered=True, enabled=True, pk__in=TenantToolPolicy.objects.filter(
            tenant_id=user.tenant_id, enabled=True).values("tool_id")).order_by("name")
    if not offered.exists():
        raise RoleRefused(_("no tool is enabled for this tenant yet: enable tools in the tenant's tool "
                            "whitelist first"))
    for tool in offered:
        result = access_grant_inline(actor=actor, user=user, tool=tool)
        outcome.notes += [f"{result.tool}: {reason}" for reason in result.reasons.values()]


def _grant_approver(actor: User, user: User, outcome: RoleOutcome) -> None:
    groups = tenant_approver_groups(user.tenant_id)
    group = groups.filter(name=approvers_group_name(user.tenant.slug)).first() or groups.order_by("name").first()
    if group is None:
        raise RoleRefused(_("this tenant has no approvers group yet: a group of the tenant that holds "
                            "approve_tool on the tools to approve"))
    user.groups.add(group)  # dual control: raises ControlChangeRequired for a person acting


def _auditors_group(actor: User, user: User) -> Group:
    name = auditors_group_name(user.tenant.slug)
    group = Group.objects.filter(name=name).first()
    if group is not None and not TenantGroup.objects.filter(group=group, tenant_id=user.tenant_id).exists():
        raise RoleRefused(_("a group named %(name)s exists outside this tenant; a platform operator can "
                            "sort it out") % {"name": name})
    app_label, codename = AUDITOR_PERMISSION.split(".")
    permission = Permission.objects.get(content_type__app_label=app_label, codename=codename)
    held = set(held_permissions(actor).values_list("pk", flat=True))
    if permission.pk not in held:
        raise RoleRefused(_("you do not hold the auditor's permission yourself, so you cannot give it; "
                            "a platform operator can"))
    if group is None:
        group = tenant_group_create(name=name, tenant_id=user.tenant_id)
    if set(group.permissions.values_list("pk", flat=True)) - held:
        raise RoleRefused(_("the group %(name)s holds permissions you do not hold") % {"name": name})
    group.permissions.add(permission)
    return group


def _grant_auditor(actor: User, user: User, outcome: RoleOutcome) -> None:
    user.groups.add(_auditors_group(actor, user))


def _grant_administrator(actor: User, user: User, outcome: RoleOutcome) -> None:
    user.is_staff = True
    user.save(update_fields=["is_staff"])  # dual control: raises ControlChangeRequired for a person acting


# -- revoke ---------------------------------------------------------------------------------------

def _drop_object_perms(user: User, codename: str) -> None:
    for row in UserObjectPermission.objects.filter(user=user, permission__codename=codename,
                                                   permission__content_type__app_label="tools"):
        row.delete()  # one by one: the control-plane audit sees each


def _revoke_requester(actor: User, user: User, outcome: RoleOutcome) -> None:
    _drop_object_perms(user, "use_tool")
    if GroupObjectPermission.objects.filter(group__user=user, permission__codename="use_tool").exists():
        outcome.notes.append(_("they still use tools through a group; take them out of it on their page"))


def _revoke_approver(actor: User, user: User, outcome: RoleOutcome) -> None:
    _drop_object_perms(user, "approve_tool")
    user.groups.remove(*tenant_approver_groups(user.tenant_id).filter(user=user))


def _revoke_auditor(actor: User, user: User, outcome: RoleOutcome) -> None:
    app_label, codename = AUDITOR_PERMISSION.split(".")
    user.user_permissions.remove(*Permission.objects.filter(content_type__app_label=app_label, codename=codename))
    user.groups.remove(*tenant_auditor_groups(user.tenant_id).filter(user=user))


def _revoke_administrator(actor: User, user: User, outcome: RoleOutcome) -> None:
    if user.pk == actor.pk:
        raise RoleRefused(_("you cannot take away your own administrator role; another administrator can"))
    user.is_staff = False
    user.save(update_fields=["is_staff"])


_GRANT = {REQUESTER: _grant_requester, APPROVER: _grant_approver, ADMINISTRATOR: _grant_administrator,
          AUDITOR: _grant_auditor}
_REVOKE = {REQUESTER: _revoke_requester, APPROVER: _revoke_approver, ADMINISTRATOR: _revoke_administrator,
           AUDITOR: _revoke_auditor}


@transaction.atomic(durable=True)
def _apply(*, actor: User, user: User, role: str, grant: bool) -> RoleOutcome:
    outcome = RoleOutcome(role=role, outcome="granted" if grant else "revoked")
    with acting_as(actor):
        (_GRANT if grant else _REVOKE)[role](actor, user, outcome)
    if not grant and not outcome.notes and role in roles_held([user])[user.pk]:
        # e.g. a platform-wide group an operator manages: the role stays, and the page must say so
        outcome.notes.append(_("they still hold this role through a group this page cannot change; a platform "
                               "operator can"))
    return outcome


def role_set(*, actor: User, user_id: int, role: str, grant: bool) -> RoleOutcome:
    """Give (`grant`) or take away `role` (one of ROLES) from member `user_id`, acting as `actor`.

    Returns a RoleOutcome: "granted"/"revoked", or "proposed" when dual control turned the grant
    into pending control changes (nothing applied until a second administrator approves them).
    Raises NotFoundError (no such member, or not one `actor` may administer: 404 as elsewhere),
    InvalidInputError (an unknown role), RoleRefused (see its message), and the domain errors of the
    rules the write meets (e.g. SERVICE_ACCOUNT_REFUSED for an approver or administrator that is a
    service account). Nothing is written when it raises.
    """
    if role not in ROLES:
        raise InvalidInputError(_("unknown role"))
    user = User.objects.select_related("tenant").filter(pk=user_id, tenant__isnull=False).first()
    if user is None or not can_administer_user(actor, user):
        raise NotFoundError(_("no such member"))
    try:
        return _apply(actor=actor, user=user, role=role, grant=grant)
    except ControlChangeRequired as required:
        changes = control_changes_propose(proposer=actor, gated=required.gated)
        return RoleOutcome(role=role, outcome="proposed", changes=changes)
