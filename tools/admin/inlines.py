"""The tenant whitelist (TenantToolPolicy rows) shown inline: on a tool's page (which tenants get
it) and on a tenant's page (which tools it is offered)."""
from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agentplatform.tenancy.admin_scope import TenantScopedMixin
from tools.admin.forms import LabelledRowsFormSet
from tools.models import TenantToolPolicy


class _TenantToolPolicyInline(TenantScopedMixin, admin.TabularInline):
    model = TenantToolPolicy
    formset = LabelledRowsFormSet
    readonly_fields = ("updated_at",)
    extra = 0
    tenant_admin_can = frozenset({"view"})


class TenantPolicyOnToolInline(_TenantToolPolicyInline):
    """Which tenants get this tool (TenantToolPolicy rows; a tenant without a row does not)."""

    fields = ("tenant", "enabled", "risk_override", "quorum", "ttl_seconds", "updated_at")
    verbose_name = _("tenant whitelist entry")
    verbose_name_plural = _("tenant whitelist (a tenant without an enabled row is not offered this tool)")


class ToolPolicyOnTenantInline(_TenantToolPolicyInline):
    """The tools this tenant is offered (TenantToolPolicy rows)."""

    fields = ("tool", "enabled", "updated_at")
    verbose_name = _("tool whitelist entry")
    verbose_name_plural = _("tool whitelist (unchecked or missing = not offered in this tenant)")
