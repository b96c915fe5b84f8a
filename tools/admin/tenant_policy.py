"""TenantToolPolicyAdmin: each tenant's whitelist entries and tighten-only overrides, with the
actions that enable or disable entries (through tools.services, so an enable guard is asked)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR
from tools.admin.forms import LabelledChangelistMixin, describe
from tools.models import TenantToolPolicy
from tools.policy import effective_policy
from tools.registry import registry
from tools.services import tenant_tool_set_enabled


@admin.register(TenantToolPolicy)
class TenantToolPolicyAdmin(LabelledChangelistMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    """Per-tenant whitelist and tighten-only overrides. Disabling a row removes the tool from that
    tenant's next runs; risk, quorum and TTL here may only make the tool stricter in that tenant."""

    list_display = ("tenant", "tool", "enabled", "risk_override", "quorum", "ttl_seconds", "in_effect", "updated_at")
    list_filter = ("enabled", "tenant", ("tool", admin.RelatedOnlyFieldListFilter))  # only tools in view
    list_editable = ("enabled",)
    list_select_related = ("tenant", "tool")
    search_fields = ("tenant__slug", "tool__name")
    fields = ("tenant", "tool", "enabled", "risk_override", "quorum", "ttl_seconds", "in_effect", "updated_at")
    readonly_fields = ("in_effect", "updated_at")
    actions = ["enable_entries", "disable_entries"]
    tenant_admin_can = frozenset({"view", "add", "change", "delete"})

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        return [f for f in fields if f != "tenant"] if self.role(request) == TENANT_ADMINISTRATOR else fields

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        """A tenant administrator picks among shared tools and their own tenant's remote tools only."""
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "tool" and self.role(request) == TENANT_ADMINISTRATOR and field is not None:
            field.queryset = field.queryset.filter(Q(tenant__isnull=True) | Q(tenant_id=request.user.tenant_id))
        return field

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if self.role(request) != TENANT_ADMINISTRATOR:
            return form
        tenant_id = request.user.tenant_id

        class TenantForm(form):
            def _post_clean(self):  # the tenant is set before model validation (unique, tighten-only)
                self.instance.tenant_id = tenant_id
                super()._post_clean()

        return TenantForm

    @admin.display(description=_("in effect in this tenant"))
    def in_effect(self, obj: TenantToolPolicy) -> str:
        if obj.pk is None:
            return "—"
        if not obj.enabled:
            return "disabled: not offered in this tenant"
        spec = registry.get(obj.tool.name)
        return describe(effective_policy(spec, obj.tool, obj) if spec else None)

    @admin.action(description=_("Enable for the tenant"), permissions=["change"])
    def enable_entries(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy]) -> None:
        self._set(request, queryset, enabled=True)

    @admin.action(description=_("Disable for the tenant"), permissions=["change"])
    def disable_entries(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy]) -> None:
        self._set(request, queryset, enabled=False)

    def _set(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy], *, enabled: bool) -> None:
        entries = list(queryset.select_related("tool"))
        done = 0
        for entry in entries:
            try:
                tenant_tool_set_enabled(tenant_id=entry.tenant_id, tool_name=entry.tool.name, enabled=enabled)
            except ValidationError as error:  # a remote tool whose definition is not the reviewed one
                self.message_user(request, f"{entry}: {' '.join(error.messages)}", messages.ERROR)
            else:
                done += 1
        self.message_user(request, (ngettext("%(n)d whitelist entry enabled; the next runs follow.",
                                            "%(n)d whitelist entries enabled; the next runs follow.", done)
                                   if enabled else
                                   ngettext("%(n)d whitelist entry disabled; the next runs follow.",
                                            "%(n)d whitelist entries disabled; the next runs follow.", done))
                          % {"n": done}, messages.SUCCESS)
