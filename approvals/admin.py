"""Admin of confirmation requests and approvals: read-only evidence. Decisions are made in the
approver dashboard or the API, through the services (never by editing rows here).

The raw arguments and the token digest are not shown: people see the masked arguments, exactly
as approvers do.
"""
from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from approvals.models import Approval, ConfirmationRequest
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin, TenantScopedMixin
from audit.admin import ReadOnlyAdminMixin, ReadOnlyInlineMixin


class ApprovalInline(TenantScopedMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = Approval
    tenant_path = "request__tenant_id"
    fields = ("approver", "decision", "comment", "created_at")
    readonly_fields = fields


@admin.register(ConfirmationRequest)
class ConfirmationRequestAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "tenant", "tool_name", "risk", "policy", "status", "user", "approvals_so_far",
                    "expires_at")
    list_filter = ("status", "policy", "risk", "tool_name", "tenant")
    search_fields = ("id", "tool_name", "summary", "user__username")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "user")
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
    list_filter = ("decision",)
    search_fields = ("approver__username", "comment", "request__id")
    date_hierarchy = "created_at"
    list_select_related = ("approver", "request")
