"""Who may read the approval quality overview, and of which tenant (docs/approvals.md, "Approval
quality"): a tenant administrator or an auditor reads their own tenant's; a platform operator picks
any tenant (default: their own, else the first). Everyone else is refused."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.utils.functional import SimpleLazyObject

from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role, is_auditor


def may_see_overview(user: Any) -> bool:
    """True for a platform operator, a tenant administrator and an auditor (agentplatform.tenancy.roles)."""
    return admin_role(user) in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR) or is_auditor(user)


def overview_tenant(user: Any, requested: str | None) -> Tenant:
    """The tenant whose overview `user` reads. requested: a tenant's slug from the query string, or
    None/"". Raises PermissionDenied (403) for a user who may not read any overview, Http404 for an
    unknown slug or another tenant's (asked by anyone but an operator), or when there is no tenant."""
    if not may_see_overview(user):
        raise PermissionDenied("the approval overview is for tenant administrators and auditors")
    if admin_role(user) == PLATFORM_OPERATOR:
        if requested:
            tenant = Tenant.objects.filter(slug=requested).first() if "\x00" not in requested else None
        else:
            tenant = Tenant.objects.filter(pk=user.tenant_id).first() if user.tenant_id else None
            tenant = tenant or Tenant.objects.order_by("slug").first()
    else:
        tenant = Tenant.objects.filter(pk=user.tenant_id).first()
        if requested and (tenant is None or tenant.slug != requested):
            tenant = None
    if tenant is None:
        raise Http404("unknown tenant")
    return tenant


def overview_nav(request: HttpRequest) -> dict:
    """Template context: {"overview_nav": lazy {"show": bool}}, whether the navigation links the overview.
    Lazy: the permission check runs only when a template reads it (base.html, signed-in users)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"overview_nav": {"show": False}}
    return {"overview_nav": SimpleLazyObject(lambda: {"show": may_see_overview(user)})}
