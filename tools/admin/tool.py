"""ToolAdmin: the tools with the policy in effect (for a tenant administrator: in their tenant),
the page of each user's effective access to them (tools.access), and guardian's grants
(tools.admin.grants)."""
from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from guardian.admin import GuardedModelAdmin

from agentplatform.tenancy.actor import current_request
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR, admin_role
from core.visible_text import visible_html
from tools.admin.effective_access import EffectiveAccessMixin
from tools.admin.forms import LabelledChangelistMixin, describe
from tools.admin.grants import ToolGrantsMixin
from tools.admin.inlines import TenantPolicyOnToolInline
from tools.admin.kill_switches import stop_selected_tools
from tools.models import TenantToolPolicy, Tool, enable_refusal
from tools.policy import EffectivePolicy, effective_policy
from tools.registry import registry


def _without_inline_parts(entry):
    """`entry` (an admin LogEntry, not saved) with the parts of its change message that describe
    inline objects (the tenant whitelist rows) left out; one that had only those says so."""
    try:
        parts = json.loads(entry.change_message or "[]")
    except ValueError:
        return entry
    if not isinstance(parts, list):
        return entry
    kept = [p for p in parts if not (isinstance(p, dict) and any(isinstance(v, dict) and "object" in v
                                                                  for v in p.values()))]
    if len(kept) != len(parts):
        entry.change_message = json.dumps(kept) if kept else "Changed tenant whitelist rows (see each tenant's audit trail)."
    return entry


@admin.register(Tool)
class ToolAdmin(EffectiveAccessMixin, ToolGrantsMixin, LabelledChangelistMixin, TenantScopedAdminMixin, GuardedModelAdmin):
    """Tools with guardian's "Object permissions" screen (top right of a tool's page) to grant
    `use_tool` and `approve_tool` to users and groups."""

    # Registration and the time of the last change are on each tool's page (and a filter): the list
    # fits 1360 px with the filters beside it.
    list_display = ("name", "enabled", "effective_risk", "effective_policy", "effective_quorum", "effective_ttl",
                    "owner", "version", "source")
    list_filter = ("enabled", "registered", "source", "default_risk", "risk_override", "policy_override")
    search_fields = ("name", "description", "owner")
    readonly_fields = ("name", "description_shown", "registered", "default_risk", "default_policy", "in_effect",
                       "owner", "version", "source", "tenant", "enable_state", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description_shown", "registered", "enabled", "enable_state", "owner", "version",
                           "source", "tenant")}),
        (_("Risk and approval policy for every tenant (blank = the registry's value)"), {
            "fields": (("default_risk", "risk_override"), ("default_policy", "policy_override"), "quorum",
                       "ttl_seconds", "critical_floor_waiver"),
        }),
        (None, {"fields": ("in_effect", "updated_at")}),
    )
    list_editable = ("enabled",)
    actions = [stop_selected_tools]  # the kill switch (tools.admin.kill_switches)
    inlines = [TenantPolicyOnToolInline]
    tenant_path = None  # tools are shared: every tenant administrator reads them
    tenant_admin_can = frozenset({"view"})

    def scoped_queryset(self, request, qs):
        """Shared tools for everyone; a tool of one tenant's MCP server only for that tenant's
        administrators and platform operators."""
        qs = super().scoped_queryset(request, qs)
        if self.role(request) == TENANT_ADMINISTRATOR:
            qs = qs.filter(Q(tenant__isnull=True) | Q(tenant_id=request.user.tenant_id))
        return qs

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        if self.role(request) == TENANT_ADMINISTRATOR:
            changelist.list_editable = ()  # global `enabled` is the operators'
        return changelist

    def _effective(self, obj: Tool) -> EffectivePolicy | None:
        """What the pipeline applies now (tools.policy.effective_policy): for a tenant administrator,
        in their tenant (the tenant's overrides included); for an operator, before tenant overrides."""
        spec = registry.get(obj.name)
        if spec is None:
            return None
        request = current_request()  # the "in effect" columns show the viewer's tenant policy
        tenant_policy = None
        if request is not None and admin_role(request.user) == TENANT_ADMINISTRATOR:
            tenant_policy = TenantToolPolicy.objects.filter(tool=obj, tenant_id=request.user.tenant_id).first()
        return effective_policy(spec, obj, tenant_policy)

    @admin.display(description=_("description"))
    def description_shown(self, obj: Tool):
        # Hidden characters (a remote tool's description comes from its server) shown as \u{…}.
        return visible_html(obj.description)

    @admin.display(description=_("may be enabled?"))
    def enable_state(self, obj: Tool) -> str:
        return enable_refusal(obj) or "yes"

    @admin.display(description=_("risk"))
    def effective_risk(self, obj: Tool) -> str:
        policy = self._effective(obj)
        return (policy.risk if policy else obj.risk) + (" (override)" if obj.risk_override else "")

    @admin.display(description=_("approval policy"))
    def effective_policy(self, obj: Tool) -> str:
        policy = self._effective(obj)
        return (policy.policy if policy else obj.policy) + (" (override)" if obj.policy_override else "")

    @admin.display(description=_("quorum"))
    def effective_quorum(self, obj: Tool) -> int | str:
        policy = self._effective(obj)
        return policy.quorum if policy and policy.policy == "APPROVERS" else "—"

    @admin.display(description=_("TTL (s)"))
    def effective_ttl(self, obj: Tool) -> int | str:
        policy = self._effective(obj)
        return policy.ttl_seconds if policy else "—"

    @admin.display(description=_("in effect now"))
    def in_effect(self, obj: Tool) -> str:
        return describe(self._effective(obj)) + (
            " (CRITICAL is always approver-gated with at least 2 distinct approvers unless a written waiver is stored)")

    change_list_template = "admin/tools/tool/change_list.html"
    change_form_template = "admin/tools/tool/change_form.html"  # guardian's, plus the effective-access link

    def history_view(self, request, object_id, extra_context=None):
        """A shared tool's history, without the rows of its tenant whitelist inline for a tenant
        administrator: an operator's change to another tenant's row ("Changed Enabled for tenant
        tool policy 'globex / refund_order'") names that tenant and what it allows. Their own
        tenant's changes are in their audit trail."""
        response = super().history_view(request, object_id, extra_context)
        if self.role(request) != TENANT_ADMINISTRATOR or not hasattr(response, "context_data"):
            return response
        page = response.context_data.get("action_list")
        if page is not None:
            page.object_list = [_without_inline_parts(entry) for entry in page.object_list]
        return response

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # rows mirror the code registry

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # confirmation requests and audit rows refer to tools; disable instead
