"""The demo's MCP server: `mcp_sources.demo_server` started over stdio by the platform itself
(python -m mcp_sources.demo_server stdio), registered platform-wide as "logistics"."""
from __future__ import annotations

import sys

from django.conf import settings

from mcp_sources.models import McpServer

DEMO_SERVER = "logistics"
DEMO_OWNER = "Logistics integration team <logistics@example.com>"


def demo_server_register() -> McpServer:
    """Create (or keep) the demo's stdio MCP server row. Returns it. Raises nothing."""
    server, _ = McpServer.objects.update_or_create(name=DEMO_SERVER, defaults={
        "transport": McpServer.Transport.STDIO, "command": sys.executable,
        "args": ["-m", "mcp_sources.demo_server", "stdio"], "env": {"PYTHONPATH": str(settings.BASE_DIR)},
        "owner": DEMO_OWNER, "timeout_seconds": 20, "tenant": None, "enabled": True})
    return server
