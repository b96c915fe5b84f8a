"""The kill switch in the admin (policies.kill_switch): the tools list's action "Stop the selected
tools", and the list of stops with the action "Release the selected stops". Both ask for the
reason on a page of their own and go through the same services as the API, so each is audited.

A tenant administrator stops tools in their tenant and sees their tenant's stops and those of
every tenant (which only a platform operator releases); a platform operator stops a tool in every
tenant or in one, and sees and releases every stop. Stops are never added, changed or deleted as
rows here.
"""
from __future__ import annotations

from typing import Any, Callable

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from core.text import is_row_id
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role
from core.errors import DomainError
from policies.kill_switch import REASON_MAX, kill_switch_engage, kill_switch_release
from policies.models import KillSwitch

EVERY_TENANT = "all"


def _reason_page(request: HttpRequest, *, action: str, title: str, intro: str, submit: str,
                 items: list[dict[str, Any]], back: tuple[str, str], scopes: list[tuple[str, str]] | None = None,
                 reason: str = "") -> TemplateResponse:
    context = {**admin.site.each_context(request), "title": title, "intro": intro, "submit": submit, "items": items,
               "action": action, "scopes": scopes, "reason": reason, "reason_max": REASON_MAX,
               "back_url": back[0], "back_label": back[1], "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
    return TemplateResponse(request, "admin/policies/killswitch/reason.html", context)


def _scopes(request: HttpRequest) -> list[tuple[str, str]]:
    """Where the viewer may stop a tool: a platform operator every tenant or one; a tenant
    administrator their own tenant only."""
    if admin_role(request.user) == PLATFORM_OPERATOR:
        return [(EVERY_TENANT, "every tenant / 所有租户")] + [
            (str(t.pk), f"only {t.slug}") for t in Tenant.objects.order_by("slug")]
    tenant = Tenant.objects.filter(pk=request.user.tenant_id).first()
    return [(str(request.user.tenant_id), f"only {tenant.slug if tenant else 'my tenant'}")]


def _apply(model_admin: admin.ModelAdmin, request: HttpRequest, rows: QuerySet,
           act: Callable[[Any, str], str]) -> bool:
    """Run `act(row, reason)` for each selected row with the posted reason; each success's text
    and each refusal (with its code) shown as a message. Returns False when the reason is
    missing (nothing was done; the page is shown again)."""
    reason = (request.POST.get("reason") or "").strip()
    if not reason:
        model_admin.message_user(request, _("A reason is required"), messages.ERROR)
        return False
    for row in rows:
        try:
            model_admin.message_user(request, act(row, reason), messages.SUCCESS)
        except DomainError as error:
            model_admin.message_user(request, f"{row}: {error.message} [{error.code}]", messages.ERROR)
    return True


@admin.action(description=_("Stop the selected tools (kill switch)"))
def stop_selected_tools(model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet):
    """ToolAdmin's action: after a page asking the reason (and, for an operator, where), stop each
    selected tool (policies.kill_switch.kill_switch_engage). Anyone but a tenant administrator
    or a platform operator is refused."""
    if admin_role(request.user) not in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR):
        model_admin.message_user(request, _("Only administrators stop tools"), messages.ERROR)
        return None
    if request.POST.get("confirm") == "yes":
        scope = request.POST.get("scope") or ""
        tenant_id = None if scope in ("", EVERY_TENANT) or not is_row_id(scope) else int(scope)

        def engage(tool, reason: str) -> str:
            engaged = kill_switch_engage(tool_name=tool.name, actor=request.user, reason=reason, tenant_id=tenant_id)
            where = "in every tenant" if engaged.stop.tenant_id is None else "in the tenant"
            return (f"{tool.name} stopped {where}; {len(engaged.cancelled)} request(s) still to run cancelled "
                    f"/ 已停用")

        if _apply(model_admin, request, queryset, engage):
            return None
    return _reason_page(
        request, action="stop_selected_tools", title="Stop tools / 停用工具",
        intro=("New calls of these tools will be denied with TOOL_STOPPED and your reason (the assistant reads it); "
               "their requests still waiting or approved are cancelled with it. Releasing is a separate action. / "
               "这些工具的新调用将被拒绝，待处理和已批准的请求将被取消。"),
        submit="Stop / 停用", items=[{"pk": t.pk, "label": t.name} for t in queryset], scopes=_scopes(request),
        back=(reverse("admin:tools_tool_changelist"), "Tools"))


@admin.register(KillSwitch)
class KillSwitchAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """The stops of tools, newest first, with the action that releases them."""

    list_display = ("tool_name", "scope", "active_shown", "reason", "engaged_by", "engaged_at", "released_by",
                    "released_at", "release_reason")
    list_filter = ("tool_name", ("released_at", admin.EmptyFieldListFilter))
    search_fields = ("tool_name", "reason", "release_reason")
    readonly_fields = ("tool_name", "tenant", "reason", "engaged_by", "engaged_at", "released_by", "released_at",
                       "release_reason")
    actions = ["release_selected"]
    tenant_path = None  # scoped below: the viewer's tenant and the stops of every tenant
    tenant_admin_can = frozenset({"view"})

    def scoped_queryset(self, request: HttpRequest, qs: QuerySet) -> QuerySet:
        qs = super().scoped_queryset(request, qs).select_related("tenant", "engaged_by", "released_by")
        if self.role(request) == TENANT_ADMINISTRATOR:
            qs = qs.filter(Q(tenant_id=request.user.tenant_id) | Q(tenant__isnull=True))
        return qs

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return False  # a stop is engaged from the tools list (or the API), never typed in as a row

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # the history of stops stays

    def get_actions(self, request: HttpRequest):
        # Django drops actions for viewers without a change permission on some paths: keep ours for
        # the roles that may release.
        actions = super().get_actions(request)
        if admin_role(request.user) not in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR):
            actions.pop("release_selected", None)
        return actions

    @admin.display(description=_("where"))
    def scope(self, obj: KillSwitch) -> str:
        return obj.tenant.slug if obj.tenant_id is not None else "every tenant / 所有租户"

    @admin.display(description=_("in force"), boolean=True)
    def active_shown(self, obj: KillSwitch) -> bool:
        return obj.active

    @admin.action(description=_("Release the selected stops"))
    def release_selected(self, request: HttpRequest, queryset: QuerySet[KillSwitch]):
        """After a page asking the reason, release each selected stop (policies.kill_switch);
        a stop of every tenant selected by a tenant administrator is refused with a message."""
        if request.POST.get("confirm") == "yes":
            def release(stop: KillSwitch, reason: str) -> str:
                kill_switch_release(stop_id=stop.pk, actor=request.user, reason=reason)
                return f"{stop.tool_name} released / 已恢复"

            if _apply(self, request, queryset, release):
                return None
        return _reason_page(
            request, action="release_selected", title="Release tools / 恢复工具",
            intro="New calls of these tools will be gated as before. Requests the stop cancelled stay cancelled.",
            submit="Release / 恢复", items=[{"pk": s.pk, "label": str(s)} for s in queryset],
            back=(reverse("admin:policies_killswitch_changelist"), "Kill switches"))
