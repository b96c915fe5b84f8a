from django.apps import AppConfig


class McpSourcesConfig(AppConfig):
    name = "mcp_sources"
    verbose_name = "MCP servers (remote tool sources)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models, which load only once the
        # app registry is ready.
        from mcp_sources import specs
        from mcp_sources.models import tool_enable_refusal
        from tools.models import add_enable_guard
        from tools.registry import registry

        # tools sits below this app: it finds the specs of remote tools through this provider, and
        # asks this guard before a Tool row or a tenant's whitelist entry is switched on.
        registry.add_provider(specs.remote_spec)
        add_enable_guard(tool_enable_refusal)
