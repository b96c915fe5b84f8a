"""Admin of pending control changes (docs/roles.md, "Trust model"): who proposed what, the old and
new state, its deadline; a second administrator of the same tenant (or a platform operator)
approves or rejects with the actions. A tenant administrator sees only their tenant's changes;
platform-wide ones (a tool's global policy, a platform-wide group) are the operators'."""
from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from agentplatform.controlplane.admin_names import name_models
from agentplatform.controlplane.bundle_admin import PolicyBundleAdmin
from agentplatform.controlplane.bundle_store import in_force
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.roles_admin import RolesUserAdmin
from agentplatform.tenancy.models import User
from agentplatform.controlplane.services import control_change_approve, control_change_reject, control_changes_expire
from core.errors import DomainError
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from policies.models import PolicyBundle
from policies.services import bundle_diff


@admin.register(PendingControlChange)
class PendingControlChangeAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Read-only rows; the decisions are the actions "Approve" and "Reject" (services re-check who
    may decide: never the proposer, never the person the change empowers)."""

    list_display = ("summary", "kind", "status", "tenant", "proposed_by", "proposed_at", "expires_at",
                    "decided_by", "decided_at")
    list_filter = ("status", "kind", "tenant")
    list_select_related = ("tenant", "proposed_by", "decided_by")
    search_fields = ("summary",)
    fields = ("summary", "kind", "status", "tenant", "proposed_by", "proposed_at", "expires_at", "old_state_shown",
              "new_state_shown", "bundle_diff", "decided_by", "decided_at", "decision_reason")
    readonly_fields = fields
    actions = ["approve_changes", "reject_changes"]
    tenant_admin_can = frozenset({"view"})

    def has_add_permission(self, request, *args) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context=None):
        control_changes_expire()  # settle on read: a change past its deadline shows EXPIRED
        return super().changelist_view(request, extra_context)

    @staticmethod
    def _json(value) -> str:
        return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, default=str))

    @admin.display(description=_("old state"))
    def old_state_shown(self, obj: PendingControlChange) -> str:
        return self._json(obj.old_state)

    @admin.display(description=_("new state"))
    def new_state_shown(self, obj: PendingControlChange) -> str:
        return self._json(obj.new_state)

    @admin.display(description=_("bundle diff"))
    def bundle_diff(self, obj: PendingControlChange) -> str:
        """For a POLICY_BUNDLE change: the diff of its bundle against the version in force now."""
        if obj.kind != PendingControlChange.Kind.POLICY_BUNDLE:
            return "—"
        current = in_force(obj.tenant_id)
        diff = bundle_diff(current.source if current else "", obj.target.get("source", ""),
                           old_name=f"v{current.version}" if current else "(none)", new_name="proposed")
        return format_html('<pre data-testid="pending-bundle-diff">{}</pre>', diff or "(identical)")

    def _decide(self, request: HttpRequest, queryset: QuerySet, *, approve: bool) -> None:
        for change in queryset.order_by("proposed_at"):
            try:
                if approve:
                    control_change_approve(change_id=change.pk, approver=request.user)
                    self.message_user(request, _("Approved and applied: %(change)s") % {"change": change.summary},
                                      messages.SUCCESS)
                else:
                    control_change_reject(change_id=change.pk, decider=request.user, reason="rejected in the admin")
                    self.message_user(request, _("Rejected: %(change)s") % {"change": change.summary}, messages.SUCCESS)
            except DomainError as error:
                self.message_user(request, f"{change.summary}: {error.message}", messages.ERROR)

    @admin.action(description=_("Approve selected changes (a second administrator)"))
    def approve_changes(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._decide(request, queryset, approve=True)

    @admin.action(description=_("Reject selected changes"))
    def reject_changes(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._decide(request, queryset, approve=False)


admin.site.register(PolicyBundle, PolicyBundleAdmin)
name_models()  # the admin's names of models and apps, in the administrator's language
# The users' admin with its Roles column and page (agentplatform.controlplane.roles_admin).
admin.site.unregister(User)
admin.site.register(User, RolesUserAdmin)
