"""Celery tasks of MCP sources: thin wrappers around mcp_sources.services."""
from __future__ import annotations

from celery import shared_task

from mcp_sources import services


@shared_task(name="mcp_sources.discover_server", ignore_result=True)
def discover_server(*, server_id: int) -> None:
    """Re-list one server's tools (after `notifications/tools/list_changed` or a changed definition
    seen at call time). Idempotent: listing twice changes nothing more."""
    services.server_discover(server_id=server_id)


@shared_task(name="mcp_sources.refresh_tool_lists", ignore_result=True)
def refresh_tool_lists() -> int:
    """Beat: every minute. Re-list every enabled server whose tool list is older than its TTL
    (`tool_list_ttl_seconds`). Returns how many servers were listed."""
    due = services.servers_due_for_refresh()
    for server_id in due:
        services.server_discover(server_id=server_id)
    return len(due)
