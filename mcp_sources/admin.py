"""Admin of MCP sources: platform operators register servers (platform-wide or for one tenant),
discover their tools and review them; a tenant administrator sees their own tenant's servers and
tools, never a server's credentials (issue 14 items 1, 2 and 5)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest

from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.roles import PLATFORM_OPERATOR
from mcp_sources import breaker, services
from mcp_sources.models import McpServer, McpTool


@admin.register(McpServer)
class McpServerAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("name", "tenant", "transport", "enabled", "owner", "protocol_version", "server_version",
                    "breaker", "discovered_at", "last_error")
    list_filter = ("enabled", "transport", "tenant")
    search_fields = ("name", "owner", "url")
    readonly_fields = ("protocol_version", "server_name", "server_version", "discovered_at", "last_error",
                       "breaker", "created_at", "updated_at")
    actions = ["discover_tools"]
    tenant_admin_can = frozenset({"view"})
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_fields(self, request: HttpRequest, obj=None):
        fields = list(super().get_fields(request, obj))
        if self.role(request) != PLATFORM_OPERATOR:  # credentials: platform operators only
            fields = [f for f in fields if f not in McpServer.SECRET_FIELDS
                      and f not in ("oauth_client_id", "command", "args")]
        return fields

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        if self.role(request) != PLATFORM_OPERATOR:
            actions.pop("discover_tools", None)
        return actions

    @admin.display(description="circuit breaker")
    def breaker(self, obj: McpServer) -> str:
        return "open" if obj.pk and breaker.breaker_is_open(server_id=obj.pk) else "closed"

    @admin.action(description="Discover tools now (new ones stay disabled)")
    def discover_tools(self, request: HttpRequest, queryset) -> None:
        for server in queryset:
            report = services.server_discover(server_id=server.pk)
            if report.error:
                self.message_user(request, f"{server.name}: {report.error}", messages.ERROR)
            else:
                self.message_user(request, f"{server.name}: {len(report.added)} added, {len(report.changed)} changed, "
                                           f"{len(report.disabled)} disabled until reviewed again, "
                                           f"{len(report.gone)} gone", messages.SUCCESS)


@admin.register(McpTool)
class McpToolAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("tool", "server", "remote_name", "reviewed", "enabled", "risk", "listed", "reviewed_by",
                    "reviewed_at", "definition_hash")
    # Only the servers of the tools this viewer sees (not every tenant's server names).
    list_filter = (("server", admin.RelatedOnlyFieldListFilter), "listed")
    search_fields = ("remote_name", "tool__name", "description")
    readonly_fields = ("server", "tool", "remote_name", "description", "input_schema", "annotations",
                       "definition_hash", "reviewed_hash", "reviewed_by", "reviewed_at", "listed", "updated_at")
    actions = ["review_and_enable"]
    tenant_path = "server__tenant_id"
    tenant_admin_can = frozenset({"view"})

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return False  # rows come from discovery

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        if self.role(request) != PLATFORM_OPERATOR:
            actions.pop("review_and_enable", None)
        return actions

    @admin.display(boolean=True)
    def reviewed(self, obj: McpTool) -> bool:
        return obj.reviewed

    @admin.display(boolean=True)
    def enabled(self, obj: McpTool) -> bool:
        return obj.tool.enabled

    @admin.display(description="risk")
    def risk(self, obj: McpTool) -> str:
        return obj.tool.risk

    @admin.action(description="Approve the definition shown and enable (risk stays HIGH unless overridden)")
    def review_and_enable(self, request: HttpRequest, queryset) -> None:
        for row in queryset:
            try:
                services.tool_review(mcp_tool_id=row.pk, reviewer=request.user)
            except ValueError as error:
                self.message_user(request, f"{row}: {error}", messages.ERROR)
            else:
                self.message_user(request, f"{row.tool.name} reviewed and enabled", messages.SUCCESS)
