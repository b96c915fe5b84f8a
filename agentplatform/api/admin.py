"""Read-only admin of the HTTP Idempotency-Key records (no add, change or delete)."""
from django.contrib import admin

from agentplatform.api.models import HttpIdempotencyKey


@admin.register(HttpIdempotencyKey)
class HttpIdempotencyKeyAdmin(admin.ModelAdmin):
    list_display = ("key", "user", "tenant", "status", "response_status", "created_at", "expires_at")
    list_filter = ("status", "tenant")
    search_fields = ("key", "user__username")
    ordering = ("-created_at",)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
