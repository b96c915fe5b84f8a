"""Admin of webhook endpoints and their delivery log (docs/notifications.md).

Platform operators create, change and deactivate endpoints, read their secret and rotate it.
Tenant administrators see their own tenant's endpoints (without the secret) and delivery log,
read-only. Another tenant's rows answer 404 (agentplatform.tenancy.admin_scope).
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from core.redaction.endpoints import safe_url
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.roles import is_platform_operator
from audit.admin import ReadOnlyAdminMixin
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.signing import new_secret
from notifications.urlcheck import host_of


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("__str__", "tenant", "host", "is_active", "created_at")
    list_filter = ("is_active", "tenant")
    search_fields = ("name", "url")
    actions = ["rotate_secret"]
    tenant_admin_can = frozenset({"view"})

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "url":
            kwargs["assume_scheme"] = "https"  # a URL typed without a scheme is https (Django 6's default)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description=_("host"))
    def host(self, obj: WebhookEndpoint) -> str:
        return host_of(obj.url)

    @admin.display(description=_("URL"))
    def safe_url(self, obj: WebhookEndpoint) -> str:
        # A relay's URL path or query is often its credential: others read scheme, host and a digest.
        return safe_url(obj.url, keep_path=False)

    def get_fields(self, request, obj=None):
        if not is_platform_operator(request.user):
            return ["tenant", "name", "safe_url", "is_active", "created_at"]
        return ["tenant", "name", "url", "is_active", "created_at", "secret"]  # only operators read these

    def get_search_fields(self, request):
        # Searching the URL would let a reader probe it one character at a time.
        return self.search_fields if is_platform_operator(request.user) else ("name",)

    def get_readonly_fields(self, request, obj=None):
        return ("created_at", "secret") if is_platform_operator(request.user) else self.get_fields(request, obj)

    def get_actions(self, request):
        return super().get_actions(request) if is_platform_operator(request.user) else {}

    @admin.action(description=_("Rotate the secret of the selected endpoints"))
    def rotate_secret(self, request, queryset) -> None:
        for endpoint in queryset:
            endpoint.secret = new_secret()
            endpoint.save(update_fields=["secret"])
        messages.success(request, f"{queryset.count()} secret(s) rotated; give the receivers the new secret.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """One row per attempt: outcome, HTTP status, error, duration, backoff before the next one."""

    list_display = ("created_at", "tenant", "endpoint", "event", "attempt", "outcome", "response_status",
                    "retry_in_seconds", "duration_ms", "confirmation_id")
    list_filter = ("outcome", "event", "tenant")
    search_fields = ("message_id", "confirmation_id")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "endpoint")
    fields = ("created_at", "tenant", "endpoint", "event", "message_id", "confirmation_id", "attempt", "outcome",
              "response_status", "error", "duration_ms", "retry_in_seconds", "body")
    readonly_fields = fields
