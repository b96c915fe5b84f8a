"""Admin of each tenant's retention: platform operators for every tenant, a tenant administrator for
their own (view, add, change; only shorter than the platform default, never below the audit floor:
agentplatform.retention.policy). Saved through the service; the control plane audits the change."""
from __future__ import annotations

from django.contrib import admin

from agentplatform.retention.models import TenantRetention
from agentplatform.retention.policy import FIELDS, defaults, setting_errors
from agentplatform.retention.services import tenant_retention_set
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR, is_platform_operator


@admin.register(TenantRetention)
class TenantRetentionAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    tenant_admin_can = frozenset({"view", "add", "change"})
    list_display = ("tenant", *FIELDS, "updated_at")
    list_filter = ("tenant",)
    readonly_fields = ("updated_at",)
    list_select_related = ("tenant",)

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        operator = is_platform_operator(request.user)
        base = defaults().as_dict()

        class Checked(form):
            def __init__(self, *args, **kw) -> None:
                super().__init__(*args, **kw)
                for name in FIELDS:
                    if name in self.fields:
                        self.fields[name].help_text = f"Days online; empty: the platform default ({base[name]})."

            def clean(self):
                data = super().clean()
                values = {name: data.get(name) for name in FIELDS}
                for name, why in setting_errors(values, platform_operator=operator).items():
                    self.add_error(name, why)
                return data

        Checked.__name__ = form.__name__
        return Checked

    def save_model(self, request, obj, form, change) -> None:
        """Through tenant_retention_set (checks the role again; the change is audited)."""
        tenant_id = request.user.tenant_id if self.role(request) == TENANT_ADMINISTRATOR else obj.tenant_id
        saved = tenant_retention_set(actor=request.user, tenant_id=tenant_id,
                                     values={name: getattr(obj, name) for name in FIELDS})
        obj.pk, obj.tenant_id, obj.updated_at = saved.pk, saved.tenant_id, saved.updated_at
        obj._state.adding = False
