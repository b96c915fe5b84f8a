from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from agentplatform.errors import DomainError
from agentplatform.tenancy.models import Tenant, User

admin.site.site_header = "agentplatform administration"
admin.site.site_title = "agentplatform admin"
admin.site.index_title = "Tools, tenants, permissions and the evidence trail"
admin.site.site_url = "/chat/"


class MembershipInline(admin.TabularInline):
    model = User
    fields = ("username", "email", "is_active", "is_staff")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name = "member"
    verbose_name_plural = "members"

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]


@admin.register(User)
class TenantUserAdmin(UserAdmin):
    list_display = ("username", "tenant", "email", "is_staff", "is_active")
    list_filter = ("tenant", "is_staff", "is_active", "groups")
    fieldsets = UserAdmin.fieldsets + (("Tenant", {"fields": ("tenant",)}),)
    add_fieldsets = UserAdmin.add_fieldsets + (("Tenant", {"fields": ("tenant",)}),)
    actions = ["issue_api_token"]

    @admin.action(description="Issue API token (replaces the user's current one)", permissions=["change"])
    def issue_api_token(self, request: HttpRequest, queryset: QuerySet[User]) -> TemplateResponse | None:
        """Rotate each selected user's DRF token and show the new keys once, on this response only
        (not in a message, which would sit in a cookie). The old keys stop working at once."""
        # The API app sits on top of every app; import its service when the action runs, so
        # tenancy (at the bottom) does not depend on it when Django loads.
        from agentplatform.api.services import api_token_issue

        issued, refused = [], []
        for user in queryset.order_by("username"):
            try:
                issued.append((user, api_token_issue(user=user, rotate=True)))
            except DomainError as error:
                refused.append((user, error.message))
        for user, reason in refused:
            self.message_user(request, f"{user.username}: {reason}", messages.ERROR)
        if not issued:
            return None
        context = {**self.admin_site.each_context(request), "title": "API tokens issued", "issued": issued,
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/tenancy/user/issued_tokens.html", context)
