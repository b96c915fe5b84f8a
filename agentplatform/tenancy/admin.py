from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from agentplatform.tenancy.models import Tenant, User


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
