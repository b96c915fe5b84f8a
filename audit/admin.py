"""Admin of the audit trail: viewable, never added, changed or deleted (the trail is append-only).

`ReadOnlyAdminMixin` is reused by the other apps' evidence admins (audit sits at the bottom, so
every app may import it).
"""
from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Q

from core.redaction.endpoints import recorded_event_shown
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from audit.admin_lists import EstimatedCountPaginator, RecentFilter, StatusFilter, tenant_in_scope
from audit.models import AuditEvent
from tools.models import Tool


class ReadOnlyAdminMixin:
    """Viewable, never added, changed or deleted, and no bulk actions (no "delete selected")."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_actions(self, request):
        return {}


class ReadOnlyInlineMixin(ReadOnlyAdminMixin):
    """Read-only inline rows (no extra empty forms)."""

    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True


class ToolNameFilter(admin.SimpleListFilter):
    """By tool name (`?tool_name=`): the names of the Tool rows in scope (the platform's tools
    and, with one tenant in scope, that tenant's own), not the distinct names of the trail."""

    title = "tool name"
    parameter_name = "tool_name"

    def lookups(self, request, model_admin):
        tools = Tool.objects.all()
        tenant_id = tenant_in_scope(request)
        if tenant_id is not None:
            tools = tools.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
        names = sorted(set(tools.values_list("name", flat=True)) | ({self.value()} if self.value() else set()))
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        return queryset.filter(tool_name=self.value()) if self.value() else queryset


@admin.register(AuditEvent)
class AuditEventAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every decision on a tool call, confirmation or approval, in order. Arguments appear only as
    their hash and masked form; tokens never reach these rows."""

    list_display = ("occurred_at", "tenant", "actor", "tool_name", "decision", "status", "policy_decision",
                    "duration_ms")
    # At a million rows (audit.admin_lists): no filter lists the trail's distinct values, no
    # date hierarchy (it lists the distinct years), no exact count past COUNT_CAP, no facet counts,
    # and no sorting by a column (each would sort every row); the order is the chain's (get_ordering).
    list_filter = ("decision", ToolNameFilter, "tenant", StatusFilter, RecentFilter)
    search_fields = ("tool_name", "status", "message", "idempotency_key", "business_result_id", "request_id",
                     "arguments_hash")
    list_select_related = ("tenant", "actor")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    sortable_by = ()
    fieldsets = (
        (None, {"fields": ("occurred_at", "tenant", "actor", "decision", "status", "message_shown")}),
        ("Call", {"fields": ("tool_name", "tool_owner", "tool_version", "policy_decision", "arguments_hash", "masked_arguments_shown", "duration_ms")}),
        ("Correlation", {"fields": ("request_id", "conversation_id", "run_id", "tool_call_id", "confirmation_id",
                                    "idempotency_key", "business_result_id", "execution")}),
    )
    readonly_fields = ("message_shown", "masked_arguments_shown")

    def get_ordering(self, request) -> tuple[str, ...]:
        """Newest first: by chain position when one tenant is listed (every filter's index ends
        with it), by time across tenants (the index on occurred_at). Both orders are unique, so
        Django adds no tie-breaker the indexes would not serve."""
        if tenant_in_scope(request) is not None:
            return ("-tenant_id", "-chain_seq")
        return ("-occurred_at", "-id")

    # A location recorded before the trail stopped recording secrets (an MCP server's URL as typed,
    # its command line) is shown as rows record it now; the row itself is never changed.
    @admin.display(description="message")
    def message_shown(self, obj: AuditEvent) -> str:
        return recorded_event_shown(obj.masked_arguments, obj.message)[1]

    @admin.display(description="masked arguments")
    def masked_arguments_shown(self, obj: AuditEvent) -> str:
        shown = recorded_event_shown(obj.masked_arguments, obj.message)[0]
        return json.dumps(shown, ensure_ascii=False, sort_keys=True) if shown is not None else "-"
