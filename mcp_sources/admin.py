"""Admin of MCP sources: platform operators register servers (platform-wide or for one tenant),
discover their tools and review them; a tenant administrator sees their own tenant's servers and
tools, never a server's credentials, command line, or its URL's userinfo and query
(docs/remote_tools.md).

A review is made on a page that shows each definition with every hidden character escaped
(core.visible_text) and carries the hash of what it showed; the review is refused when
the definition changed since (mcp_sources.services.tool_review)."""
from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from core.redaction.endpoints import safe_url
from core.errors import DomainError
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.roles import PLATFORM_OPERATOR
from core.visible_text import visible_html
from mcp_sources import breaker, services
from mcp_sources.models import McpServer, McpTool
from mcp_sources.schema import strict_schema

# Fields of a server a tenant administrator never reads: credentials, the command line, and the
# URLs as typed (shown to them without userinfo, query and fragment instead).
_OPERATOR_ONLY = (*McpServer.SECRET_FIELDS, "oauth_client_id", "command", "args", "url", "oauth_token_url")


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
        if self.role(request) != PLATFORM_OPERATOR:  # credentials and command lines: platform operators only
            fields = [f for f in fields if f not in _OPERATOR_ONLY and f not in ("safe_url", "safe_token_url")]
            fields[fields.index("transport") + 1:fields.index("transport") + 1] = ["safe_url", "safe_token_url"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        return (*super().get_readonly_fields(request, obj), "safe_url", "safe_token_url")

    def get_search_fields(self, request: HttpRequest):
        # Searching the URL would let a reader probe its query one character at a time.
        return self.search_fields if self.role(request) == PLATFORM_OPERATOR else ("name", "owner")

    @admin.display(description=_("URL"))
    def safe_url(self, obj: McpServer) -> str:
        return safe_url(obj.url)

    @admin.display(description=_("OAuth token URL"))
    def safe_token_url(self, obj: McpServer) -> str:
        return safe_url(obj.oauth_token_url)

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        if self.role(request) != PLATFORM_OPERATOR:
            actions.pop("discover_tools", None)
        return actions

    @admin.display(description=_("circuit breaker"))
    def breaker(self, obj: McpServer) -> str:
        return "open" if obj.pk and breaker.breaker_is_open(server_id=obj.pk) else "closed"

    @admin.action(description=_("Discover tools now (new ones stay disabled)"))
    def discover_tools(self, request: HttpRequest, queryset) -> None:
        for server in queryset:
            report = services.server_discover(server_id=server.pk)
            if report.error:
                self.message_user(request, f"{server.name}: {report.error}", messages.ERROR)
            else:
                self.message_user(request, f"{server.name}: {len(report.added)} added, {len(report.changed)} changed, "
                                           f"{len(report.disabled)} disabled until reviewed again, "
                                           f"{len(report.gone)} gone, {len(report.refused)} refused "
                                           f"(hidden characters, names or sizes: see MCP tools)",
                                  messages.WARNING if report.refused else messages.SUCCESS)


def _shown(value) -> str:
    """A definition part as a reviewer reads it: JSON (indented) or text, every hidden character
    escaped and marked."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    return format_html('<pre class="mcp-definition">{}</pre>', visible_html(text))


def _model_view(row: McpTool) -> dict | str:
    """What the model would be sent if this definition were approved (the schema tightened as
    mcp_sources.schema.strict_schema does), or why it cannot be built."""
    try:
        schema = strict_schema(row.input_schema)
    except ValueError as error:
        return str(error)
    return {"name": row.tool.name, "description": row.description or row.remote_name, "parameters": schema}


@admin.register(McpTool)
class McpToolAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("tool", "server", "remote_name_shown", "reviewed", "refused", "enabled", "risk", "listed",
                    "reviewed_by", "reviewed_at", "definition_hash")
    # Only the servers of the tools this viewer sees (not every tenant's server names).
    list_filter = (("server", admin.RelatedOnlyFieldListFilter), "listed")
    search_fields = ("remote_name", "tool__name", "description")
    # Every part of a definition is shown escaped (a raw field would render hidden characters as nothing).
    fields = ("server", "tool", "remote_name_shown", "refusal", "description_shown", "input_schema_shown",
              "annotations_shown", "definition_hash", "review_state", "reviewed_hash", "reviewed_definition_shown",
              "reviewed_by", "reviewed_at", "listed", "updated_at")
    readonly_fields = fields
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

    @admin.display(description=_("remote name"))
    def remote_name_shown(self, obj: McpTool) -> str:
        return visible_html(obj.remote_name)

    @admin.display(description=_("description (hidden characters shown as \\u{…})"))
    def description_shown(self, obj: McpTool) -> str:
        return _shown(obj.description)

    @admin.display(description=_("input schema"))
    def input_schema_shown(self, obj: McpTool) -> str:
        return _shown(obj.input_schema)

    @admin.display(description=_("the server's annotations (not used for risk)"))
    def annotations_shown(self, obj: McpTool) -> str:
        return _shown(obj.annotations) if obj.annotations is not None else "—"

    @admin.display(description=_("reviewed definition (what the model is sent)"))
    def reviewed_definition_shown(self, obj: McpTool) -> str:
        return _shown(obj.reviewed_definition) if obj.reviewed_definition is not None else "—"

    @admin.display(description=_("may be enabled?"))
    def review_state(self, obj: McpTool) -> str:
        return obj.review_problem() or "yes: the current definition is the reviewed one"

    @admin.display(boolean=True)
    def reviewed(self, obj: McpTool) -> bool:
        return obj.reviewed

    @admin.display(boolean=True, description=_("refused"))
    def refused(self, obj: McpTool) -> bool:
        return bool(obj.refusal)

    @admin.display(boolean=True)
    def enabled(self, obj: McpTool) -> bool:
        return obj.tool.enabled

    @admin.display(description=_("risk"))
    def risk(self, obj: McpTool) -> str:
        return obj.tool.risk

    @admin.action(description=_("Review the selected definitions… (approve what is shown and enable)"))
    def review_and_enable(self, request: HttpRequest, queryset):
        """First POST: a page showing each selected definition escaped, with the hash of what it
        shows in the form. Second POST (`confirm`): each tool is approved only if its definition
        still has the hash shown (mcp_sources.services.tool_review)."""
        rows = list(queryset.select_related("server", "tool"))
        if request.POST.get("confirm") == "yes":
            for row in rows:
                shown = request.POST.get(f"definition_hash_{row.pk}", "")
                try:
                    services.tool_review(mcp_tool_id=row.pk, reviewer=request.user, definition_hash=shown)
                except DomainError as error:
                    self.message_user(request, f"{row}: {error.message}", messages.ERROR)
                else:
                    self.message_user(request, f"{row.tool.name} reviewed and enabled", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": _("Review remote tools"),
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "rows": [{"row": row, "model_view": _shown(_model_view(row)), "description": _shown(row.description),
                      "schema": _shown(row.input_schema), "annotations": self.annotations_shown(row)}
                     for row in rows],
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/mcp_sources/mcptool/review.html", context)
