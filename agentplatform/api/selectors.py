"""Reads of the API app: API keys."""
from __future__ import annotations

from django.db.models import QuerySet

from agentplatform.api.models import ApiKey
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR, admin_role


def api_keys_for(*, user, whole_tenant: bool = False) -> QuerySet[ApiKey]:
    """The API keys `user` may see, newest first: their own; with whole_tenant, a tenant
    administrator (staff with a tenant) sees every member's, a platform operator every key."""
    keys = ApiKey.objects.select_related("user").order_by("-created", "public_id")
    if whole_tenant and user.is_superuser:
        return keys
    if whole_tenant and admin_role(user) == TENANT_ADMINISTRATOR:
        return keys.filter(user__tenant_id=user.tenant_id, user__is_superuser=False)
    return keys.filter(user=user)
