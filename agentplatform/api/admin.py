"""Admin of the API app: the HTTP Idempotency-Key records (read-only) and API keys, both scoped by
tenant (docs/roles.md)."""
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agentplatform.api.models import ApiKey, HttpIdempotencyKey
from agentplatform.tenancy.credentials import api_key_revoke
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


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """API keys (django-rest-knox): name, prefix, owner, expiry, last use; nothing secret is stored
    to show. A tenant administrator sees and revokes only their tenant's members' keys (never a
    superuser's); another tenant's key answers 404. Deleting revokes through the audited service.
    Nobody adds a key here: a person creates their own through the API, a service account's key
    comes from the users' "Issue API key for service account" action, an operator's shell from
    `manage.py issue_api_token` (shown once there; docs/operations.md, "API keys")."""

    list_display = ("name", "token_key", "user", "created", "expiry", "last_used_at")
    search_fields = ("name", "token_key", "user__username")
    ordering = ("-created",)
    tenant_path = "user__tenant_id"
    tenant_admin_can = frozenset({"view", "delete"})
    actions = ["revoke_selected"]

    def get_queryset(self, request):
        qs = super().get_queryset(request).select_related("user")
        return qs.filter(user__is_superuser=False) if self.role(request) == "tenant_administrator" else qs

    exclude = ("digest",)  # not the key, but nothing an administrator needs to read either

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name != "digest"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # a queryset delete would skip the audit
        return actions

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def delete_model(self, request, obj) -> None:
        api_key_revoke(public_id=obj.public_id, actor=request.user)

    @admin.action(description=_("Revoke selected API keys"), permissions=["delete"])
    def revoke_selected(self, request, queryset) -> None:
        for public_id in queryset.values_list("public_id", flat=True):
            api_key_revoke(public_id=public_id, actor=request.user)
        self.message_user(request, _("Revoked."))


# django-axes' records of sign-in attempts name usernames and addresses of every tenant: platform
# operators only (tenant administrators get no capability on them, docs/roles.md).
def _operators_only(axes_admin: type) -> type:
    return type(axes_admin.__name__, (TenantScopedAdminMixin, axes_admin),
                {"tenant_path": None, "tenant_admin_can": frozenset(), "__doc__": axes_admin.__doc__})


for _model in list(admin.site._registry):
    if _model._meta.app_label == "axes":
        _axes_admin = type(admin.site._registry[_model])
        admin.site.unregister(_model)
        admin.site.register(_model, _operators_only(_axes_admin))
