"""Admin of the API app: the HTTP Idempotency-Key records (read-only) and API tokens, both
scoped by tenant (docs/roles.md)."""
from django.contrib import admin
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from agentplatform.api.models import HttpIdempotencyKey
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin


@admin.register(HttpIdempotencyKey)
class HttpIdempotencyKeyAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
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


admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class ScopedTokenAdmin(TenantScopedAdminMixin, TokenAdmin):
    """API tokens: who has one and since when; never the key (it is shown once, when issued with
    the users' "Issue API token" action). Deleting a row revokes the token. A tenant administrator
    sees and revokes only their tenant's members' tokens (never a superuser's)."""

    list_display = ("user", "created")
    tenant_path = "user__tenant_id"
    tenant_admin_can = frozenset({"view", "delete"})

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.filter(user__is_superuser=False) if self.role(request) == "tenant_administrator" else qs

    def has_add_permission(self, request) -> bool:
        return False  # issue with the users' action, which shows the key once

    def has_change_permission(self, request, obj=None) -> bool:
        return False
