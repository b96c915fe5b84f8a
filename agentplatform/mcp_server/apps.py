from django.apps import AppConfig


class McpServerConfig(AppConfig):
    """The MCP server at /mcp/ and its records of gated calls that arrived over MCP (label `mcp_server`)."""

    name = "agentplatform.mcp_server"
    label = "mcp_server"
    verbose_name = "MCP server"
    default_auto_field = "django.db.models.BigAutoField"
