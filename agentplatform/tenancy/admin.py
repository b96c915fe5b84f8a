"""Admin of tenants, their members and groups, scoped by role (docs/roles.md).

Platform operators see every tenant. A tenant administrator sees their own tenant (read-only),
manages its members (never a superuser, never moving anyone to another tenant, never making
anyone a superuser; `is_staff` only makes a member a tenant administrator of the same tenant),
its groups, and delegates only the global permissions they hold themselves.
"""
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, Permission
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.template.response import TemplateResponse
from django.utils.html import format_html_join
from django.utils.translation import gettext_lazy as _

from core.errors import DomainError
from agentplatform.tenancy.admin_scope import (
    TenantScopedAdminMixin,
    TenantScopedMixin,
    guard_m2m_changes,
    held_permissions,
    refused_response,
    tenant_groups,
)
from agentplatform.tenancy.actor import current_request
from agentplatform.tenancy.models import Tenant, TenantGroup, User
from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR, admin_role, can_administer_user
from agentplatform.tenancy.services import mark_group_tenant

admin.site.site_header = _("agentplatform administration")
admin.site.site_title = _("agentplatform admin")
admin.site.index_title = _("Tools, tenants, permissions and the evidence trail")
admin.site.site_url = "/chat/"
# The index lists every model; a sidebar repeating it on every page would leave the lists' tables
# too little width at 1360 px.
admin.site.enable_nav_sidebar = False


class MembershipInline(TenantScopedMixin, admin.TabularInline):
    model = User
    fields = ("username", "email", "is_active", "is_staff")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name = _("member")
    verbose_name_plural = _("members")
    tenant_admin_can = frozenset({"view"})

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.filter(is_superuser=False) if admin_role(request.user) == TENANT_ADMINISTRATOR else qs


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Tenants: platform operators create and rename them; a tenant administrator reads their own."""

    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]
    tenant_path = "pk"
    tenant_admin_can = frozenset({"view"})


class TenantGroupInline(admin.StackedInline):
    """Operators only: which tenant a group belongs to (none = platform-wide)."""

    model = TenantGroup
    extra = 0
    max_num = 1
    verbose_name = _("tenant (leave empty for a platform-wide group)")
    verbose_name_plural = verbose_name


admin.site.unregister(Group)


@admin.register(Group)
class TenantGroupAdmin(TenantScopedAdminMixin, GroupAdmin):
    """Groups. A tenant administrator sees and creates only their tenant's groups and gives them
    only permissions they hold; platform-wide groups (no TenantGroup row) are operators' only."""

    list_display = ("name", "tenant", "member_count")
    list_select_related = ("tenant_link__tenant",)
    readonly_fields = ("members_shown",)
    tenant_path = "tenant_link__tenant_id"
    tenant_admin_can = frozenset({"view", "add", "change", "delete"})

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(member_total=Count("user", distinct=True))

    @admin.display(description=_("tenant"))
    def tenant(self, obj: Group) -> str:
        try:
            link = obj.tenant_link
        except TenantGroup.DoesNotExist:
            link = None
        return link.tenant.slug if link else _("— platform-wide —")

    @admin.display(description=_("members"), ordering="member_total")
    def member_count(self, obj: Group) -> int:
        return getattr(obj, "member_total", 0)

    @admin.display(description=_("members"))
    def members_shown(self, obj: Group) -> str:
        """The group's members, each a link to their page (a tenant administrator sees their own
        tenant's members only)."""
        if obj.pk is None:
            return "—"
        members = obj.user_set.order_by("username")
        viewer = getattr(current_request(), "user", None)
        if admin_role(viewer) == TENANT_ADMINISTRATOR:
            members = members.filter(tenant_id=viewer.tenant_id, is_superuser=False)
        links = format_html_join(", ", '<a href="{}">{}</a>', (
            (reverse("admin:tenancy_user_change", args=[u.pk]), u.username) for u in members))
        return links or _("nobody yet")

    def get_inlines(self, request, obj):
        return [TenantGroupInline] if self.role(request) != TENANT_ADMINISTRATOR else []

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if self.role(request) != TENANT_ADMINISTRATOR:
            return form
        current = set(obj.permissions.values_list("pk", flat=True)) if obj else set()
        return guard_m2m_changes(form, allowed={"permissions": set(held_permissions(request.user).values_list(
            "pk", flat=True))}, current={"permissions": current}, model_of={"permissions": Permission})

    def save_model(self, request, obj, form, change) -> None:
        tenant_admin = self.role(request) == TENANT_ADMINISTRATOR
        if not change:
            # The creation is audited before the group's TenantGroup row exists: name its tenant
            # now, so the row goes to that tenant's trail only (not every tenant's).
            mark_group_tenant(obj, request.user.tenant_id if tenant_admin else self._inline_tenant_id(request, obj))
        admin.ModelAdmin.save_model(self, request, obj, form, change)
        if tenant_admin and not change:
            TenantGroup.objects.create(group=obj, tenant_id=request.user.tenant_id)

    def _inline_tenant_id(self, request, obj) -> int | None:
        """The tenant an operator chose in the (already validated) tenant inline of a new group,
        or None for a platform-wide group."""
        prefix = TenantGroupInline(self.model, self.admin_site).get_formset(request, obj).get_default_prefix()
        if request.POST.get(f"{prefix}-TOTAL_FORMS") in (None, "0") or request.POST.get(f"{prefix}-0-DELETE"):
            return None  # no tenant row is saved: platform-wide
        value = request.POST.get(f"{prefix}-0-tenant")
        try:
            return int(value) if value else None
        except (TypeError, ValueError):
            return None


@admin.register(User)
class TenantUserAdmin(TenantScopedAdminMixin, UserAdmin):
    list_display = ("username", "tenant", "email", "is_service_account", "is_staff", "is_superuser", "is_active")
    list_filter = ("tenant", "is_service_account", "is_staff", "is_active", "groups")
    fieldsets = UserAdmin.fieldsets + ((_("Tenant"), {"fields": ("tenant",)}),
                                       (_("Kind"), {"fields": ("is_service_account",)}))
    add_fieldsets = UserAdmin.add_fieldsets + ((_("Tenant"), {"fields": ("tenant",)}),
                                               (_("Kind"), {"fields": ("is_service_account",)}))
    actions = ["issue_service_account_key"]
    tenant_admin_can = frozenset({"view", "add", "change"})
    tenant_hidden_filters = ("tenant", "groups")

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        # an operator's account is out of a tenant administrator's reach, even with a tenant set
        return qs.filter(is_superuser=False) if self.role(request) == TENANT_ADMINISTRATOR else qs

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:  # an account's kind is fixed at creation (tenancy.service_accounts)
            fields.append("is_service_account")
        if self.role(request) == TENANT_ADMINISTRATOR:
            fields += ["is_superuser", "tenant", "last_login", "date_joined"]
        return fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if self.role(request) == TENANT_ADMINISTRATOR and obj is None:  # added to the admin's tenant
            return tuple(fs for fs in fieldsets if "tenant" not in fs[1].get("fields", ()))
        return fieldsets

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if self.role(request) != TENANT_ADMINISTRATOR or obj is None:
            return form
        held = set(held_permissions(request.user).values_list("pk", flat=True))
        # a group of the tenant whose global permissions the administrator holds: membership
        # delegates those permissions, so nothing beyond what they hold
        groups = {g.pk for g in tenant_groups(request.user.tenant_id).prefetch_related("permissions")
                  if {p.pk for p in g.permissions.all()} <= held}
        allowed = {"groups": groups, "user_permissions": held}
        current = {"groups": set(obj.groups.values_list("pk", flat=True)),
                   "user_permissions": set(obj.user_permissions.values_list("pk", flat=True))}
        return guard_m2m_changes(form, allowed=allowed, current=current,
                                 model_of={"groups": Group, "user_permissions": Permission})

    def save_model(self, request, obj, form, change) -> None:
        if self.role(request) == TENANT_ADMINISTRATOR:
            obj.tenant_id = request.user.tenant_id
            if not change:
                obj.is_superuser = False
        UserAdmin.save_model(self, request, obj, form, change)

    def user_change_password(self, request, id, form_url=""):
        """A service account never has a usable password (it signs in with its API key only): its
        password page answers with a message instead of a form whose password would be discarded."""
        user = self.get_object(request, id)
        if user is not None and user.is_service_account:
            self.message_user(request, _("%(user)s is a service account: it has no password and signs in with its API key only")
                              % {"user": user.username}, messages.ERROR)
            return HttpResponseRedirect(reverse("admin:tenancy_user_change", args=[user.pk]))
        try:
            return super().user_change_password(request, id, form_url)
        except DomainError as error:  # e.g. another person's credential (controlplane.credentials)
            return refused_response(self, request, error)

    def save_related(self, request, form, formsets, change) -> None:
        """A user just moved to another tenant starts with no groups or permissions (tenancy.moves):
        the form's groups and permissions were the old tenant's, so they are not saved back."""
        if getattr(form.instance, "_moved_from_tenant", None) is not None:
            self.message_user(request, _("%(user)s moved to another tenant: their grants, groups, permissions, staff status, API "
                                "keys, sessions, open requests and runs of the old tenant were ended; grant what they "
                                "need in the new one.") % {"user": form.instance.username},
                              messages.WARNING)
            return
        super().save_related(request, form, formsets, change)

    @admin.action(description=_("Issue API key for service account (shown once)"),
                  permissions=["change"])
    def issue_service_account_key(self, request: HttpRequest, queryset: QuerySet[User]) -> TemplateResponse | None:
        """Issue a new key for each selected service account (its other keys are revoked) and show
        the keys once, on this response only (not in a message, which would sit in a cookie). A
        person is refused: a key is shown only to the person it authenticates, who creates it
        themselves (docs/operations.md, "API keys"). Only for accounts the signed-in administrator
        may administer (tenancy.roles); audited."""
        issued, refused = [], []
        for user in queryset.order_by("username"):
            if not can_administer_user(request.user, user):
                refused.append((user, _("you may not issue a key for this user")))
                continue
            try:
                issued.append((user, api_token_issue(user=user, rotate=True, name="issued in the admin",
                                                     actor=request.user)))
            except DomainError as error:
                refused.append((user, error.message))
        for user, reason in refused:
            self.message_user(request, f"{user.username}: {reason}", messages.ERROR)
        if not issued:
            return None
        context = {**self.admin_site.each_context(request), "title": _("API keys issued"), "issued": issued,
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/tenancy/user/issued_tokens.html", context)
