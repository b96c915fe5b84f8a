"""Admin of the tool registry mirror, by role (docs/roles.md).

Platform operators: tools (enable, global risk/policy overrides, quorum, TTL, the written reason
for loosening a CRITICAL tool), every tenant's whitelist, guardian grants to anyone.
Tenant administrators: read the tools with the policy in effect *in their tenant*; manage their
tenant's whitelist entries and tighten-only overrides (TenantToolPolicy); grant `use_tool` /
`approve_tool` on guardian's object-permission pages to their own tenant's users and groups only.

Tool rows mirror the code registry (`tools_sync_registry`), so they are never added or deleted
here. Everything shown as "in effect" is computed by `tools.policy.effective_policy`, the function
the pipeline uses.
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest
from django.contrib.admin.utils import unquote
from django.shortcuts import get_object_or_404, redirect, render
from django.template.response import TemplateResponse
from django.urls import path, reverse
from guardian.admin import (
    AdminGroupObjectPermissionsForm,
    AdminUserObjectPermissionsForm,
    GroupManage,
    GuardedModelAdmin,
    UserManage,
)
from guardian.shortcuts import get_groups_with_perms, get_users_with_perms

from agentplatform.tenancy.actor import current_request
from agentplatform.tenancy.admin import TenantAdmin as BaseTenantAdmin
from agentplatform.errors import DomainError
from agentplatform.tenancy.admin_scope import (TenantScopedAdminMixin, TenantScopedMixin, refused_response, tenant_groups,
                                                tenant_users)
from agentplatform.tenancy.models import Tenant, User
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR, admin_role
from audit.admin import ReadOnlyAdminMixin
from tools.access import tool_access, tools_access
from agentplatform.visible_text import visible_html
from tools.models import IdempotencyRecord, TenantToolPolicy, Tool, enable_refusal
from tools.policy import EffectivePolicy, effective_policy
from tools.registry import registry
from tools.services import tenant_tool_set_enabled

# What a tenant administrator may grant on a tool (guardian object permissions). Django's own
# add/change/delete/view_tool are platform operators' business.
TENANT_GRANTABLE = ("use_tool", "approve_tool")


def _describe(policy: EffectivePolicy | None) -> str:
    if policy is None:
        return "not registered in code: never offered"
    return f"risk {policy.risk}, policy {policy.policy}, quorum {policy.quorum}, TTL {policy.ttl_seconds} s"


def _label_row_fields(form) -> None:
    """Name each field of a form shown as one row of a table (a changelist's editable column, a
    tabular inline) for assistive technology: such tables have column headers but no <label>, so
    each input gets an aria-label "<field> (<row's object>)" (axe-core `label`, `select-name`)."""
    row = str(form.instance) if form.instance.pk else "new entry / 新条目"
    for name, field in form.fields.items():
        widget = field.widget
        target = getattr(widget, "widget", widget)  # a RelatedFieldWidgetWrapper wraps the <select>
        if "aria-label" not in target.attrs:  # a new dict: widgets' attrs may be shared between copies
            target.attrs = {**target.attrs, "aria-label": f"{field.label or name} ({row})"}
            if target is not widget:
                widget.attrs = target.attrs


class _LabelledRowsFormSet(BaseInlineFormSet):
    """An inline formset whose rows' inputs are labelled (the DELETE box included)."""

    def add_fields(self, form, index) -> None:
        super().add_fields(form, index)
        _label_row_fields(form)


class LabelledChangelistMixin:
    """A ModelAdmin whose changelist's editable columns are labelled per row."""

    def get_changelist_form(self, request, **kwargs):
        base = super().get_changelist_form(request, **kwargs)

        class Labelled(base):
            def __init__(self, *args, **kw) -> None:
                super().__init__(*args, **kw)
                _label_row_fields(self)

        return Labelled


class _TenantToolPolicyInline(TenantScopedMixin, admin.TabularInline):
    model = TenantToolPolicy
    formset = _LabelledRowsFormSet
    readonly_fields = ("updated_at",)
    extra = 0
    tenant_admin_can = frozenset({"view"})


class TenantPolicyOnToolInline(_TenantToolPolicyInline):
    """Which tenants get this tool (TenantToolPolicy rows; a tenant without a row does not)."""

    fields = ("tenant", "enabled", "risk_override", "quorum", "ttl_seconds", "updated_at")
    verbose_name = "tenant whitelist entry"
    verbose_name_plural = "tenant whitelist (a tenant without an enabled row is not offered this tool)"


class ToolPolicyOnTenantInline(_TenantToolPolicyInline):
    """The tools this tenant is offered (TenantToolPolicy rows)."""

    fields = ("tool", "enabled", "updated_at")
    verbose_name = "tool whitelist entry"
    verbose_name_plural = "tool whitelist (unchecked or missing = not offered in this tenant)"


class _TenantUserManage(UserManage):
    """guardian's user picker, limited to the tenant administrator's own tenant (else: "does not exist")."""

    tenant_id: int

    def clean_user(self):
        from django.forms import ValidationError

        user = super().clean_user()
        if not tenant_users(self.tenant_id).filter(pk=user.pk).exists():
            raise ValidationError(self.fields["user"].error_messages["does_not_exist"])
        return user


class _TenantGroupManage(GroupManage):
    tenant_id: int

    def clean_group(self):
        from django.forms import ValidationError

        group = super().clean_group()
        if not tenant_groups(self.tenant_id).filter(pk=group.pk).exists():
            raise ValidationError(self.fields["group"].error_messages["does_not_exist"])
        return group


class _LimitedChoices:
    """guardian's object-permission form offering only `use_tool` and `approve_tool`; saving
    touches only those (guardian's save_obj_perms works on the offered choices)."""

    def get_obj_perms_field_choices(self):
        return [(code, name) for code, name in super().get_obj_perms_field_choices() if code in TENANT_GRANTABLE]


class _TenantUserPermsForm(_LimitedChoices, AdminUserObjectPermissionsForm):
    pass


class _TenantGroupPermsForm(_LimitedChoices, AdminGroupObjectPermissionsForm):
    pass


def _without_inline_parts(entry):
    """`entry` (an admin LogEntry, not saved) with the parts of its change message that describe
    inline objects (the tenant whitelist rows) left out; one that had only those says so."""
    import json

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
class ToolAdmin(LabelledChangelistMixin, TenantScopedAdminMixin, GuardedModelAdmin):
    """Tools with guardian's "Object permissions" screen (top right of a tool's page) to grant
    `use_tool` and `approve_tool` to users and groups."""

    list_display = ("name", "enabled", "effective_risk", "effective_policy", "effective_quorum", "effective_ttl",
                    "owner", "version", "source", "registered", "updated_at")
    list_filter = ("enabled", "registered", "source", "default_risk", "risk_override", "policy_override")
    search_fields = ("name", "description", "owner")
    readonly_fields = ("name", "description_shown", "registered", "default_risk", "default_policy", "in_effect",
                       "owner", "version", "source", "tenant", "enable_state", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description_shown", "registered", "enabled", "enable_state", "owner", "version",
                           "source", "tenant")}),
        ("Risk and approval policy for every tenant (blank = the registry's value)", {
            "fields": (("default_risk", "risk_override"), ("default_policy", "policy_override"), "quorum",
                       "ttl_seconds", "critical_floor_waiver"),
        }),
        (None, {"fields": ("in_effect", "updated_at")}),
    )
    list_editable = ("enabled",)
    inlines = [TenantPolicyOnToolInline]
    tenant_path = None  # tools are shared: every tenant administrator reads them
    tenant_admin_can = frozenset({"view"})

    def scoped_queryset(self, request, qs):
        """Shared tools for everyone; a tool of one tenant's MCP server only for that tenant's
        administrators and platform operators (issue 14 item 5)."""
        qs = super().scoped_queryset(request, qs)
        if self.role(request) == TENANT_ADMINISTRATOR:
            from django.db.models import Q

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

    @admin.display(description="description")
    def description_shown(self, obj: Tool):
        # Hidden characters (a remote tool's description comes from its server) shown as \u{…}.
        return visible_html(obj.description)

    @admin.display(description="may be enabled?")
    def enable_state(self, obj: Tool) -> str:
        return enable_refusal(obj) or "yes"

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
        return _describe(self._effective(obj)) + (
            " (CRITICAL is always approver-gated with at least 2 distinct approvers unless a written waiver is stored)")

    # -- effective access: may this user use this tool, and what is missing (tools.access) ---------

    change_list_template = "admin/tools/tool/change_list.html"
    change_form_template = "admin/tools/tool/change_form.html"  # guardian's, plus the effective-access link

    def get_urls(self):
        urls = super().get_urls()
        view = self.admin_site.admin_view(self.effective_access_view)
        return [path("effective-access/", view, name="tools_tool_effective_access")] + urls

    def effective_access_view(self, request: HttpRequest) -> TemplateResponse:
        """`/admin/tools/tool/effective-access/?user=<id>[&tool=<id>]`: for one user, each tool (or
        the one chosen) with every condition of access (tools.access) held or missing, and who can
        fix it. Operators pick any member of a tenant; a tenant administrator only their tenant's
        members (another tenant's user, or a superuser, answers 404)."""
        role = self.role(request)
        if role is None:
            raise Http404("no access")
        users = User.objects.filter(tenant__isnull=False)
        if role == TENANT_ADMINISTRATOR:
            users = tenant_users(request.user.tenant_id).filter(is_superuser=False)
        users = users.order_by("username")
        chosen = tool = None
        if request.GET.get("user"):
            chosen = get_object_or_404(users, pk=request.GET["user"]) if request.GET["user"].isdigit() else None
            if chosen is None:
                raise Http404("no such user")
        # The tools this viewer may see (another tenant's MCP tools are not among them), and of
        # those, for a chosen user, the ones their tenant can see at all.
        tools = self.get_queryset(request)
        if chosen is not None:
            tools = tools.filter(Q(tenant__isnull=True) | Q(tenant_id=chosen.tenant_id))
        if request.GET.get("tool"):
            tool = get_object_or_404(tools, pk=request.GET["tool"]) if request.GET["tool"].isdigit() else None
            if tool is None:
                raise Http404("no such tool")
        rows = []
        if chosen is not None:
            rows = [tool_access(user=chosen, tool=tool)] if tool is not None else tools_access(user=chosen)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta,
                   "title": "Effective access / 实际权限", "users": users, "tools": tools.order_by("name"),
                   "chosen": chosen, "tool": tool, "rows": rows,
                   "keys": [("member", "member / 成员"), ("platform", "platform / 平台"), ("tenant", "tenant / 租户"),
                            ("use_tool", "use_tool"), ("permission", "permission / 权限")]}
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/tools/tool/effective_access.html", context)

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

    # -- guardian's object-permission pages, scoped ------------------------------------------------
    # guardian lets anyone with change permission on the model grant anything to anyone. Here a
    # platform operator keeps that; a tenant administrator sees and grants only use_tool /
    # approve_tool, only to users and groups of their tenant; another tenant's user or group
    # answers 404. Saves are atomic, so each grant and its audit row commit together.

    def _grants_allowed(self, request) -> bool:
        return self.role(request) is not None

    def has_change_permission(self, request, obj=None) -> bool:
        # guardian's views ask has_change_permission(request, None); Tool rows themselves stay
        # read-only for tenant administrators (tenant_admin_can has no "change").
        if getattr(request, "_obj_perms_view", False):
            return self._grants_allowed(request)
        return super().has_change_permission(request, obj)

    def get_obj_perms_user_select_form(self, request):
        if self.role(request) != TENANT_ADMINISTRATOR:
            return super().get_obj_perms_user_select_form(request)
        return type("TenantUserManage", (_TenantUserManage,), {"tenant_id": request.user.tenant_id})

    def get_obj_perms_group_select_form(self, request):
        if self.role(request) != TENANT_ADMINISTRATOR:
            return super().get_obj_perms_group_select_form(request)
        return type("TenantGroupManage", (_TenantGroupManage,), {"tenant_id": request.user.tenant_id})

    def get_obj_perms_manage_user_form(self, request):
        return _TenantUserPermsForm if self.role(request) == TENANT_ADMINISTRATOR else \
            super().get_obj_perms_manage_user_form(request)

    def get_obj_perms_manage_group_form(self, request):
        return _TenantGroupPermsForm if self.role(request) == TENANT_ADMINISTRATOR else \
            super().get_obj_perms_manage_group_form(request)

    def obj_perms_manage_view(self, request, object_pk):
        """guardian's page for an operator; for a tenant administrator the same page listing only
        their tenant's users and groups, whose pickers find only those."""
        request._obj_perms_view = True
        if self.role(request) != TENANT_ADMINISTRATOR:
            return super().obj_perms_manage_view(request, object_pk)
        obj = get_object_or_404(self.get_queryset(request), pk=unquote(object_pk))
        tenant_id = request.user.tenant_id
        members = set(tenant_users(tenant_id).values_list("pk", flat=True))
        groups = set(tenant_groups(tenant_id).values_list("pk", flat=True))
        users_perms = sorted(((u, [p for p in perms if p in TENANT_GRANTABLE]) for u, perms in get_users_with_perms(
            obj, attach_perms=True, with_group_users=False).items() if u.pk in members), key=lambda i: i[0].username)
        groups_perms = sorted(((g, [p for p in perms if p in TENANT_GRANTABLE]) for g, perms in get_groups_with_perms(
            obj, attach_perms=True).items() if g.pk in groups), key=lambda i: i[0].name)
        user_form_class = self.get_obj_perms_user_select_form(request)
        group_form_class = self.get_obj_perms_group_select_form(request)
        user_form, group_form = user_form_class(), group_form_class()
        info = self.admin_site.name, self.model._meta.app_label, self.model._meta.model_name
        if request.method == "POST" and "submit_manage_user" in request.POST:
            user_form = user_form_class(request.POST)
            if user_form.is_valid():
                return redirect(reverse("%s:%s_%s_permissions_manage_user" % info,
                                        args=[obj.pk, user_form.cleaned_data["user"].pk]))
        elif request.method == "POST" and "submit_manage_group" in request.POST:
            group_form = group_form_class(request.POST)
            if group_form.is_valid():
                return redirect(reverse("%s:%s_%s_permissions_manage_group" % info,
                                        args=[obj.pk, group_form.cleaned_data["group"].pk]))
        context = self.get_obj_perms_base_context(request, obj)
        context.update({"users_perms": dict(users_perms), "groups_perms": dict(groups_perms),
                        "user_form": user_form, "group_form": group_form})
        request.current_app = self.admin_site.name
        return render(request, self.get_obj_perms_manage_template(), context)

    def get_obj_perms_base_context(self, request, obj):
        context = super().get_obj_perms_base_context(request, obj)
        if self.role(request) == TENANT_ADMINISTRATOR:
            context["model_perms"] = [p for p in context["model_perms"] if p.codename in TENANT_GRANTABLE]
        return context

    def obj_perms_manage_user_view(self, request, object_pk, user_id):
        request._obj_perms_view = True
        if self.role(request) == TENANT_ADMINISTRATOR and not tenant_users(request.user.tenant_id).filter(
                pk=user_id).exists():
            raise Http404("no such user")
        try:
            with transaction.atomic():
                return super().obj_perms_manage_user_view(request, object_pk, user_id)
        except DomainError as error:  # a refused grant (e.g. approve_tool to a service account)
            return refused_response(self, request, error)

    def obj_perms_manage_group_view(self, request, object_pk, group_id):
        request._obj_perms_view = True
        if self.role(request) == TENANT_ADMINISTRATOR and not tenant_groups(request.user.tenant_id).filter(
                pk=group_id).exists():
            raise Http404("no such group")
        try:
            with transaction.atomic():
                return super().obj_perms_manage_group_view(request, object_pk, group_id)
        except DomainError as error:  # a refused grant (e.g. approve_tool to a group with a service account)
            return refused_response(self, request, error)


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
            from django.db.models import Q

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

    @admin.display(description="in effect in this tenant")
    def in_effect(self, obj: TenantToolPolicy) -> str:
        if obj.pk is None:
            return "—"
        if not obj.enabled:
            return "disabled: not offered in this tenant"
        spec = registry.get(obj.tool.name)
        return _describe(effective_policy(spec, obj.tool, obj) if spec else None)

    @admin.action(description="Enable for the tenant", permissions=["change"])
    def enable_entries(self, request: HttpRequest, queryset: QuerySet[TenantToolPolicy]) -> None:
        self._set(request, queryset, enabled=True)

    @admin.action(description="Disable for the tenant", permissions=["change"])
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
        self.message_user(request, f"{done} whitelist entr{'y' if done == 1 else 'ies'} "
                                   f"{'enabled' if enabled else 'disabled'}; the next runs follow.", messages.SUCCESS)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
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
