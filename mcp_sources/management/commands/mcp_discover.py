"""python manage.py mcp_discover [name ...]: list MCP servers' tools now and mirror them."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from mcp_sources.models import McpServer
from mcp_sources.services import server_discover


class Command(BaseCommand):
    help = "Discover the tools of MCP servers (all enabled ones, or those named); new tools stay disabled."

    def add_arguments(self, parser) -> None:
        parser.add_argument("names", nargs="*")

    def handle(self, *args, names: list[str], **options) -> None:
        servers = McpServer.objects.filter(name__in=names) if names else McpServer.objects.filter(enabled=True)
        if names and servers.count() != len(set(names)):
            raise CommandError("unknown server name")
        for server in servers:
            report = server_discover(server_id=server.pk)
            if report.error:
                self.stderr.write(f"{server.name}: {report.error}")
                continue
            self.stdout.write(f"{server.name}: added {len(report.added)}, changed {len(report.changed)}, "
                              f"disabled {len(report.disabled)}, gone {len(report.gone)}, refused {len(report.refused)}")
