from django.apps import AppConfig


class McpSourcesConfig(AppConfig):
    name = "mcp_sources"
    verbose_name = "MCP servers (remote tool sources)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mcp_sources import specs
        from tools.registry import registry

        # tools sits below this app: it finds the specs of remote tools through this provider.
        registry.add_provider(specs.remote_spec)
