"""The Tenant admin, re-registered with the tenant's tool whitelist inline."""
from __future__ import annotations

from django.contrib import admin

from agentplatform.tenancy.admin import TenantAdmin as BaseTenantAdmin
from agentplatform.tenancy.models import Tenant
from tools.admin.inlines import ToolPolicyOnTenantInline

# Tenants get their tool whitelist inline. The inline lives here, not in tenancy/admin.py:
# tenancy sits below tools and never imports it.
admin.site.unregister(Tenant)


@admin.register(Tenant)
class TenantAdmin(BaseTenantAdmin):
    """Tenants with their members (read-only) and their tool whitelist."""

    inlines = [*BaseTenantAdmin.inlines, ToolPolicyOnTenantInline]
