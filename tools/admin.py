"""Admin of the tool registry mirror: tools (enable, risk/policy overrides, quorum, TTL, guardian
object permissions), per-tenant whitelists, and read-only idempotency records.

Tool rows mirror the code registry (`tools_sync_registry`), so they are never added or deleted
here; what an admin changes are the overrides, which the pipeline reads on every call (and
re-checks when a confirmation is consumed, DESIGN section 9).
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from guardian.admin import GuardedModelAdmin

from agentplatform.tenancy.admin import TenantAdmin as BaseTenantAdmin
from agentplatform.tenancy.models import Tenant
from audit.admin import ReadOnlyAdminMixin
from tools.models import IdempotencyRecord, TenantToolPolicy, Tool
from tools.policy import EffectivePolicy, effective_policy
from tools.registry import registry
from tools.services import tenant_tool_set_enabled


class _TenantToolPolicyInline(admin.TabularInline):
    model = TenantToolPolicy
    readonly_fields = ("updated_at",)
    extra = 0


class TenantPolicyOnToolInline(_TenantToolPolicyInline):
    """Which tenants get this tool (TenantToolPolicy rows; a tenant without a row does not)."""

    fields = ("tenant", "enabled", "updated_at")
    verbose_name = "tenant whitelist entry"
    verbose_name_plural = "tenant whitelist (a tenant without an enabled row is not offered this tool)"


class ToolPolicyOnTenantInline(_TenantToolPolicyInline):
    """The tools this tenant is offered (TenantToolPolicy rows)."""

    fields = ("tool", "enabled", "updated_at")
    verbose_name = "tool whitelist entry"
    verbose_name_plural = "tool whitelist (unchecked or missing = not offered in this tenant)"


@admin.register(Tool)
class ToolAdmin(GuardedModelAdmin):
    """Tools with guardian's "Object permissions" screen (top right of a tool's page) to grant
    `use_tool` and `approve_tool` to users and groups."""

    list_display = ("name", "enabled", "effective_risk", "effective_policy", "effective_quorum", "effective_ttl",
                    "registered", "updated_at")
    list_filter = ("enabled", "registered", "default_risk", "risk_override", "policy_override")
    search_fields = ("name", "description")
    readonly_fields = ("name", "description", "registered", "default_risk", "default_policy", "in_effect",
                       "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description", "registered", "enabled")}),
        ("Risk and approval policy (blank = the registry's value)", {
            "fields": (("default_risk", "risk_override"), ("default_policy", "policy_override"), "quorum",
                       "ttl_seconds"),
        }),
        (None, {"fields": ("in_effect", "updated_at")}),
    )
    list_editable = ("enabled",)
    inlines = [TenantPolicyOnToolInline]

    @staticmethod
    def _effective(obj: Tool) -> EffectivePolicy | None:
        """What the pipeline applies now: registry spec + overrides + floors (tools.policy)."""
        spec = registry.get(obj.name)
        return effective_policy(spec, obj) if spec is not None else None

    @admin.display(description="risk")
    def effective_risk(self, obj: Tool) -> str:
        policy = self._effective(obj)
        return (policy.risk if policy else obj.risk) + (" (override)" if obj.risk_override else "")

    @admin.display(description="approval policy")
    def effective_policy(self, obj: Tool) -> str:
        policy = self._effective(obj)
        return (policy.policy if policy else obj.policy) + (" (override)" if obj.policy_override else "")

    @admin.display(description="quorum")
    def effective_quorum(self, obj: Tool) -> int | str:
        policy = self._effective(obj)
        return policy.quorum if policy and policy.policy == "APPROVERS" else "—"

    @admin.display(description="TTL (s)")
    def effective_ttl(self, obj: Tool) -> int | str:
        policy = self._effective(obj)
        return policy.ttl_seconds if policy else "—"

    @admin.display(description="in effect now")
    def in_effect(self, obj: Tool) -> str:
        policy = self._effective(obj)
        if policy is None:
            return "not registered in code: never offered"
        return (f"risk {policy.risk}, policy {policy.policy}, quorum {policy.quorum}, TTL {policy.ttl_seconds} s "
                "(CRITICAL is always approver-gated with at least 2 distinct approvers)")

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # rows mirror the code registry

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # confirmation requests and audit rows refer to tools; disable instead


@admin.register(TenantToolPolicy)
class TenantToolPolicyAdmin(admin.ModelAdmin):
    """Per-tenant tool whitelist. Disabling a row removes the tool from that tenant's next runs."""

    list_display = ("tenant", "tool", "enabled", "updated_at")
    list_filter = ("enabled", "tenant", "tool")
    list_editable = ("enabled",)
    list_select_related = ("tenant", "tool")
    search_fields = ("tenant__slug", "tool__name")
    actions = ["enable_entries", "disable_entries"]

    @admin.action(description="Enable for the tenant", permissions=["change"])
    def enable_entries(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy]) -> None:
        self._set(request, queryset, enabled=True)

    @admin.action(description="Disable for the tenant", permissions=["change"])
    def disable_entries(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy]) -> None:
        self._set(request, queryset, enabled=False)

    def _set(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy], *, enabled: bool) -> None:
        entries = list(queryset.select_related("tool"))
        for entry in entries:
            tenant_tool_set_enabled(tenant_id=entry.tenant_id, tool_name=entry.tool.name, enabled=enabled)
        self.message_user(request, f"{len(entries)} whitelist entr{'y' if len(entries) == 1 else 'ies'} "
                                   f"{'enabled' if enabled else 'disabled'}; the next runs follow.", messages.SUCCESS)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Claims and stored results of side effects: evidence, never edited by hand."""

    list_display = ("tool_name", "status", "tenant", "short_key", "business_result_id", "created_at", "updated_at")
    list_filter = ("status", "tool_name", "tenant")
    search_fields = ("key", "business_result_id", "arguments_hash")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)

    @admin.display(description="key")
    def short_key(self, obj: IdempotencyRecord) -> str:
        return obj.key[:16] + "…"


# Tenants get their tool whitelist inline. The inline lives here, not in tenancy/admin.py:
# tenancy sits below tools and never imports it (DESIGN section 2).
admin.site.unregister(Tenant)


@admin.register(Tenant)
class TenantAdmin(BaseTenantAdmin):
    """Tenants with their members (read-only) and their tool whitelist."""

    inlines = [*BaseTenantAdmin.inlines, ToolPolicyOnTenantInline]
