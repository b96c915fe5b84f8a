"""The two administrative roles (docs/roles.md), decided in code from the user row, never from
which permission boxes happen to be ticked.

- **Platform operator**: an active superuser. Global tool settings, tenants, everything.
- **Tenant administrator**: an active staff user who is not a superuser and belongs to exactly one
  tenant. In `/admin/` they see and change only that tenant (agentplatform.tenancy.admin_scope).

Any other staff user (staff without a tenant, inactive) administers nothing.
"""
from __future__ import annotations

from typing import Any

PLATFORM_OPERATOR = "platform_operator"
TENANT_ADMINISTRATOR = "tenant_administrator"


def admin_role(user: Any) -> str | None:
    """Return PLATFORM_OPERATOR, TENANT_ADMINISTRATOR or None for `user` (any object with the
    auth user attributes; AnonymousUser gives None)."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return PLATFORM_OPERATOR
    if user.is_staff and getattr(user, "tenant_id", None) is not None:
        return TENANT_ADMINISTRATOR
    return None


def is_platform_operator(user: Any) -> bool:
    """True for an active superuser."""
    return admin_role(user) == PLATFORM_OPERATOR


def administered_tenant_id(user: Any) -> int | None:
    """The tenant a tenant administrator administers; None for operators (all tenants) and for
    everyone else (nothing). Callers must check the role first."""
    return user.tenant_id if admin_role(user) == TENANT_ADMINISTRATOR else None


def can_administer_user(actor: Any, user: Any) -> bool:
    """May `actor` manage `user` (change, issue or revoke their API token, grant them tool
    permissions)? Operators: anyone. Tenant administrators: active-or-not members of their own
    tenant who are not superusers (an operator's account is out of reach, even if it carries a
    tenant). Everyone else: nobody."""
    role = admin_role(actor)
    if role == PLATFORM_OPERATOR:
        return True
    if role == TENANT_ADMINISTRATOR:
        return user.tenant_id == actor.tenant_id and not user.is_superuser
    return False


AUDITOR_PERMISSION = "audit.export_auditevent"


def is_auditor(user: Any) -> bool:
    """An auditor reads (never changes) their tenant's audit trail, exports and verifies it, and
    follows its ids to the request, run and conversation: an active member of one tenant holding
    AUDITOR_PERMISSION (a user or group grant). The demo's `<tenant>-auditor` is one, through the
    `<tenant>-auditors` group."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_authenticated", False):
        return False
    return getattr(user, "tenant_id", None) is not None and user.has_perm(AUDITOR_PERMISSION)
