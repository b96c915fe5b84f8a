"""Admin of the calls made over MCP: read-only evidence, scoped to the tenant administrator's own
tenant (agentplatform.tenancy.admin_scope). A call changes only through the MCP service and the
approvals services, never by editing rows here. The key itself is never stored: rows show the
key's name (kept after the key was revoked)."""
from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agentplatform.mcp_server.models import McpCall
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from audit.admin import ReadOnlyAdminMixin


@admin.register(McpCall)
class McpCallAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The gated calls made over MCP: who (user, key name), which tool, the confirmation request it
    created, and its stored (masked) answer once it ended. Operators see every tenant's; a tenant
    administrator views their own tenant's only."""

    list_display = ("created_at", "tenant", "user", "key_name", "tool_name", "status", "request", "updated_at")
    list_filter = ("status", "tool_name", "tenant")
    search_fields = ("id", "tool_call_id", "key_name", "tool_name", "user__username", "request__id")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "user", "request")
    fieldsets = (
        (None, {"fields": ("id", "tenant", "user", "key_name", "api_key", "status", "result")}),
        (_("Call"), {"fields": ("tool_name", "arguments_hash", "tool_call_id", "request")}),
        (_("Correlation"), {"fields": ("conversation_id", "created_at", "updated_at")}),
    )
    tenant_admin_can = frozenset({"view"})
