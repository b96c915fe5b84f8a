"""Admin of the demo business data (stock, orders, cancellations, refunds): read-only. These rows
stand in for a customer's systems of record; the only writer is the governed tool pipeline."""
from __future__ import annotations

from django.contrib import admin

from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from audit.admin import ReadOnlyAdminMixin
from tools.catalog.models import Cancellation, Order, Refund, StockLevel


@admin.register(StockLevel)
class StockLevelAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("sku", "warehouse_code", "tenant", "available_quantity", "locked_quantity", "updated_at")
    list_filter = ("tenant", "warehouse_code")
    search_fields = ("sku",)


@admin.register(Order)
class OrderAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("order_id", "tenant", "status", "amount", "created_at", "updated_at")
    list_filter = ("status", "tenant")
    search_fields = ("order_id",)
    # Customer contact data stays out of the list; the detail page shows it to staff only.


@admin.register(Cancellation)
class CancellationAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("cancelled_at", "order", "tenant", "previous_status", "requested_by", "reason")
    list_filter = ("tenant",)
    list_select_related = ("order", "tenant", "requested_by")


@admin.register(Refund)
class RefundAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("refunded_at", "order", "tenant", "amount", "requested_by", "reason")
    list_filter = ("tenant",)
    list_select_related = ("order", "tenant", "requested_by")
