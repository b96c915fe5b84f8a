"""Demo business data the built-in tools act on: stock levels, orders, cancellations, refunds.

Stands in for a customer's order and inventory systems; every row is tenant-scoped.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class StockLevel(models.Model):
    """Stock of one SKU in one warehouse. Cost and supplier prices never reach the model."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    sku = models.CharField(max_length=16)
    warehouse_code = models.CharField(max_length=16)
    available_quantity = models.PositiveIntegerField(default=0)
    locked_quantity = models.PositiveIntegerField(default=0)
    cost_price = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    supplier_floor_price = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "sku", "warehouse_code"], name="one_stock_row")]
        ordering = ["sku", "warehouse_code"]

    def __str__(self) -> str:
        return f"{self.sku}@{self.warehouse_code}"


class Order(models.Model):
    """A customer order. `order_id` is the business id (A + 12 digits), unique per tenant."""

    class Status(models.TextChoices):
        PAID = "PAID"
        SHIPPED = "SHIPPED"
        COMPLETED = "COMPLETED"
        CANCELLED = "CANCELLED"
        REFUNDED = "REFUNDED"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    order_id = models.CharField(max_length=13)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PAID)
    customer_name = models.CharField(max_length=100)
    customer_phone = models.CharField(max_length=32)
    shipping_address = models.CharField(max_length=300)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3, default="CNY", help_text="ISO 4217 code of `amount`.")
    items = models.JSONField(default=list, blank=True,
                             help_text='Order lines: [{"sku", "name", "quantity"}] (shown to approvers).')
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "order_id"], name="one_order_id_per_tenant")]
        # The approval context's customer history (tools.catalog.services._customer_history).
        indexes = [models.Index(fields=["tenant", "customer_phone", "-created_at"], name="order_customer_recent")]
        ordering = ["-created_at", "order_id"]
        permissions = [("cancel_order", "Can cancel orders"), ("refund_order", "Can refund orders")]

    def __str__(self) -> str:
        return self.order_id


class Cancellation(models.Model):
    """The business record of one cancellation (the side effect counted by exactly-once tests)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="cancellations")
    reason = models.CharField(max_length=500)
    previous_status = models.CharField(max_length=16)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    cancelled_at = models.DateTimeField(auto_now_add=True)


class Refund(models.Model):
    """The business record of one refund."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="refunds")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    reason = models.CharField(max_length=500)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    refunded_at = models.DateTimeField(auto_now_add=True)
