"""Admin of conversations, runs, messages and run events: read-only, for support and audits."""
from __future__ import annotations

from django.contrib import admin

from agentplatform.runtime.models import Conversation, Message, ModelCallCount, Run, RunEvent, TenantModelQuota
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin, TenantScopedMixin
from audit.admin import ReadOnlyAdminMixin, ReadOnlyInlineMixin


class MessageInline(TenantScopedMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = Message
    tenant_path = "conversation__tenant_id"
    fields = ("created_at", "role", "content", "tool_call_id", "in_memory")
    readonly_fields = fields
    show_change_link = False


class RunInline(TenantScopedMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = Run
    fields = ("created_at", "status", "iterations", "stop_reason", "error_code")
    readonly_fields = fields


class RunEventInline(TenantScopedMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = RunEvent
    tenant_path = "run__tenant_id"
    fields = ("seq", "type", "payload", "created_at")
    readonly_fields = fields
    show_change_link = False


@admin.register(Conversation)
class ConversationAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("title", "tenant", "user", "created_at", "updated_at")
    list_filter = ("tenant",)
    search_fields = ("id", "title", "user__username")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "user")
    inlines = [RunInline, MessageInline]


@admin.register(Run)
class RunAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "tenant", "user", "status", "iterations", "stop_reason", "error_code")
    list_filter = ("status", "tenant", "error_code")
    search_fields = ("id", "request_id", "user__username")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "user")
    exclude = ("state",)  # working messages: tool traces live in the events and the audit trail
    inlines = [RunEventInline]


@admin.register(RunEvent)
class RunEventAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_path = "run__tenant_id"
    list_display = ("run", "seq", "type", "created_at")
    list_filter = ("type",)
    search_fields = ("run__id",)
    list_select_related = ("run",)


@admin.register(TenantModelQuota)
class TenantModelQuotaAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """A tenant's own daily budget of model calls, overriding TENANT_MODEL_CALLS_PER_DAY. Platform
    operators set it; a tenant administrator reads their tenant's."""

    list_display = ("tenant", "calls_per_day")
    tenant_admin_can = frozenset({"view"})


@admin.register(ModelCallCount)
class ModelCallCountAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Model calls per tenant and UTC day (refused ones included)."""

    list_display = ("tenant", "day", "calls")
    list_filter = ("tenant",)
    ordering = ("-day",)
