"""Tenants and the users who belong to them. Everything else is scoped by tenant."""
from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models


class Tenant(models.Model):
    """One customer organisation. `slug` is its stable public name."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class User(AbstractUser):
    """A person (or program) acting inside exactly one tenant (the membership).

    `tenant` is null only for platform operators without business data.
    """

    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="users")

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"


class TenantGroup(models.Model):
    """Makes an auth Group belong to one tenant. A group without this row is platform-wide and is
    managed by platform operators only (docs/roles.md); a tenant administrator sees, creates and
    fills only the groups of their tenant."""

    group = models.OneToOneField("auth.Group", primary_key=True, on_delete=models.CASCADE, related_name="tenant_link")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="groups")

    class Meta:
        verbose_name = "tenant of a group"

    def __str__(self) -> str:
        return f"{self.group_id} in {self.tenant_id}"
