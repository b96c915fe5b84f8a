"""IdempotencyRecordAdmin: the claims and stored results of side effects, read-only."""
from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from audit.admin import ReadOnlyAdminMixin
from tools.models import IdempotencyRecord


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Claims and stored results of side effects: evidence, never edited by hand."""

    list_display = ("tool_name", "status", "tenant", "short_key", "business_result_id", "created_at", "updated_at")
    list_filter = ("status", "tool_name", "tenant")
    search_fields = ("key", "business_result_id", "arguments_hash")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)

    @admin.display(description=_("key"))
    def short_key(self, obj: IdempotencyRecord) -> str:
        return obj.key[:16] + "…"
