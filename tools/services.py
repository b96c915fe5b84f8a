"""Writes on the tool registry mirror and tenant policies."""
from __future__ import annotations

from django.conf import settings
from django.db import transaction

from tools.models import TenantToolPolicy, Tool
from tools.registry import registry


def tools_sync_registry() -> list[Tool]:
    """Create or refresh one Tool row per registered tool; mark rows no longer in code unregistered.

    Keeps admin overrides and `enabled` untouched. Returns the rows of the registered tools.
    """
    # Registers the built-in catalog. Imported here, when the registry is synced, not at the top:
    # the catalog's module loads its app's models, and this module is imported while apps load.
    import tools.catalog.tools  # noqa: F401

    rows = []
    with transaction.atomic():
        for spec in registry.all():
            row, _ = Tool.objects.update_or_create(
                name=spec.name,
                defaults={"description": spec.description.strip(), "default_risk": spec.risk,
                          "default_policy": spec.default_policy, "registered": True,
                          "owner": spec.owner or settings.TOOLS_DEFAULT_OWNER,
                          "version": spec.version or settings.TOOLS_DEFAULT_VERSION, "source": "local"},
            )
            rows.append(row)
        # Remote tools (source "mcp:<server>") are mirrored by mcp_sources, not by the code registry.
        Tool.objects.filter(source="local").exclude(name__in=[s.name for s in registry.all()]).update(registered=False)
    return rows


def post_migrate_sync(sender, **kwargs) -> None:
    """post_migrate receiver: mirror the registry once the tools table exists."""
    tools_sync_registry()


@transaction.atomic
def tenant_tool_set_enabled(*, tenant_id: int, tool_name: str, enabled: bool) -> TenantToolPolicy:
    """Enable or disable one tool for one tenant. Raises Tool.DoesNotExist for an unknown tool;
    ValidationError (nothing changed) when switching on an entry of a tool that may not be enabled
    now (tools.models.ENABLE_GUARDS: a remote tool whose definition is not the reviewed one)."""
    tool = Tool.objects.get(name=tool_name)
    policy, _ = TenantToolPolicy.objects.update_or_create(tenant_id=tenant_id, tool=tool, defaults={"enabled": enabled})
    return policy
