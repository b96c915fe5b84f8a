"""Admin of confirmation requests and approvals: read-only evidence. Decisions are made in the
approver dashboard or the API, through the services (never by editing rows here).

The raw arguments and the token digest are not shown: people see the masked arguments, exactly
as approvers do.

A changelist costs its page, not the table (docs/performance.md, "Scale"): no full count (the
paginator counts at most core.paging.COUNT_CAP rows, then shows the planner's estimate as
"about N"), filters whose choices are fixed or read from the small tool table rather than a
DISTINCT over every request, and a date filter instead of the date hierarchy (whose year links
are a DISTINCT over every row).
"""
from __future__ import annotations

from django.contrib import admin
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from approvals.models import Approval, ConfirmationRequest
from core.paging import EstimatedCountPaginator
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin, TenantScopedMixin, tenant_in_scope
from audit.admin import ReadOnlyAdminMixin, ReadOnlyInlineMixin


class ToolNameFilter(admin.SimpleListFilter):
    """By tool: the choices are the names of the Tool rows in scope (the platform's tools and, with
    one tenant in scope, that tenant's own: never another tenant's), not the distinct names of
    every request ever made."""

    title = _("tool name")
    parameter_name = "tool_name"

    def lookups(self, request, model_admin):
        tool_model = ConfirmationRequest._meta.get_field("tool").related_model  # approvals sits below tools
        tools = tool_model.objects.all()
        tenant_id = tenant_in_scope(request)
        if tenant_id is not None:
            tools = tools.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
        return [(name, name) for name in tools.order_by("name").values_list("name", flat=True).distinct()]

    def queryset(self, request, queryset):
        return queryset.filter(tool_name=self.value()) if self.value() else queryset


class RiskFilter(admin.SimpleListFilter):
    """By risk level: the four levels, without reading the requests to list them."""

    title = _("risk")
    parameter_name = "risk"
    LEVELS = ("LOW", "MEDIUM", "HIGH", "CRITICAL")

    def lookups(self, request, model_admin):
        return [(level, level) for level in self.LEVELS]

    def queryset(self, request, queryset):
        return queryset.filter(risk=self.value()) if self.value() else queryset


class ApprovalInline(TenantScopedMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = Approval
    tenant_path = "request__tenant_id"
    fields = ("approver", "decision", "comment", "created_at")
    readonly_fields = fields


@admin.register(ConfirmationRequest)
class ConfirmationRequestAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "tenant", "tool_name", "risk", "policy", "status", "user", "approvals_so_far",
                    "expires_at")
    list_filter = ("status", "policy", RiskFilter, ToolNameFilter, ("created_at", admin.DateFieldListFilter), "tenant")
    search_fields = ("id", "tool_name", "summary", "user__username")
    list_select_related = ("tenant", "user")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    fieldsets = (
        (None, {"fields": ("id", "tenant", "user", "status", "outcome_code", "summary")}),
        (_("Call"), {"fields": ("tool_name", "risk", "policy", "quorum", "masked_arguments", "arguments_hash",
                             "approval_context", "context_excerpt")}),
        (_("Lifecycle"), {"fields": ("created_at", "expires_at", "confirmed_at", "decided_at", "consumed_at")}),
        (_("Correlation"), {"fields": ("conversation_id", "run_id", "tool_call_id")}),
    )
    inlines = [ApprovalInline]

    @admin.display(description=_("approvals"))
    def approvals_so_far(self, obj: ConfirmationRequest) -> str:
        if obj.policy != ConfirmationRequest.Policy.APPROVERS:
            return "—"
        approved = sum(1 for a in obj.approvals.all()
                       if a.decision in (Approval.Decision.APPROVE, Approval.Decision.EDIT) and a.revision == obj.revision)
        return f"{approved} / {obj.quorum}"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("approvals")


@admin.register(Approval)
class ApprovalAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_path = "request__tenant_id"
    list_display = ("created_at", "approver", "decision", "request", "comment")
    list_filter = ("decision", ("created_at", admin.DateFieldListFilter))
    search_fields = ("approver__username", "comment", "request__id")
    list_select_related = ("approver", "request")
    ordering = ("-created_at", "-id")  # newest first, as the requests; the id breaks ties
    paginator = EstimatedCountPaginator
    show_full_result_count = False
