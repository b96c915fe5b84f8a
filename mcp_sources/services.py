"""Writes on MCP sources: discovery (mirror a server's tools into disabled HIGH-risk Tool rows,
disable a reviewed tool whose definition changed) and review (enable the reviewed definition).
The network is never touched inside a transaction: discovery lists first, then writes."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction

from agentplatform import clock
from agentplatform.tenancy.models import Tenant
from audit import events
from audit.models import AuditEvent
from mcp_sources import specs
from mcp_sources.client import Listing, McpUnavailable, ServerConfig, list_tools
from mcp_sources.models import McpServer, McpTool
from mcp_sources.schema import wire_name
from tools.models import ApprovalPolicy, RiskLevel, TenantToolPolicy, Tool

logger = logging.getLogger(__name__)


@dataclass
class DiscoveryReport:
    """What one discovery did: tool names added (disabled), changed (disabled again when they had
    been reviewed), gone (no longer listed), and the error when the server could not be listed."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    error: str = ""


def _tenants(server: McpServer) -> list[int]:
    """The tenants whose audit trail records a change of this server's tools."""
    if server.tenant_id is not None:
        return [server.tenant_id]
    return list(Tenant.objects.order_by("pk").values_list("pk", flat=True))


def _audit(server: McpServer, *, tool_name: str, status: str, message: str, details: dict,
           actor_id: int | None = None, owner: str = "", version: str = "") -> None:
    for tenant_id in _tenants(server):
        events.record(tenant_id=tenant_id, decision=AuditEvent.Decision.CONTROL_CHANGE, status=status,
                      actor_id=actor_id, tool_name=tool_name, tool_owner=owner, tool_version=version,
                      masked_arguments={"object": {"type": "mcp_tool", "id": tool_name}, "server": server.name,
                                        **details},
                      message=message)


def _version(listing: Listing, definition: str) -> str:
    """A remote tool's version: the server's version and the first 12 hex digits of its definition
    hash, so any change of name, description or schema is a new version."""
    return f"{(listing.server_version or '0')[:40]}+{definition[:12]}"


def server_discover(*, server_id: int) -> DiscoveryReport:
    """List the server's tools and mirror them (issue 14 items 2-3). Returns a DiscoveryReport.

    New tools get a Tool row (`source = mcp:<server>`, risk HIGH, disabled, owner from the server)
    and stay disabled until an administrator reviews them (`tool_review`). A reviewed tool whose
    name, description or schema changed is disabled again, and the change is audited with both
    hashes. Nothing the server says about risk (annotations) is used. A server that cannot be listed
    keeps its tools as they are; the error is stored on the server and returned.
    Raises McpServer.DoesNotExist.
    """
    server = McpServer.objects.get(pk=server_id)
    report = DiscoveryReport()
    try:
        listing = list_tools(ServerConfig.of(server))
    except McpUnavailable as error:
        McpServer.objects.filter(pk=server.pk).update(last_error=str(error)[:500])
        report.error = str(error)
        return report
    with transaction.atomic(durable=not transaction.get_connection().in_atomic_block):
        server = McpServer.objects.select_for_update().get(pk=server_id)
        server.protocol_version = listing.protocol_version[:32]
        server.server_name, server.server_version = listing.server_name[:200], listing.server_version[:64]
        server.discovered_at, server.last_error = clock.now(), ""
        server.save(update_fields=["protocol_version", "server_name", "server_version", "discovered_at",
                                   "last_error", "updated_at"])
        known = {t.remote_name: t for t in McpTool.objects.select_related("tool").filter(server=server)}
        for remote in listing.tools:
            version = _version(listing, remote.hash)
            row = known.pop(remote.name, None)
            if row is None:
                _add(server, remote, version, report)
                continue
            tool = row.tool
            if row.definition_hash != remote.hash or not row.listed:
                was_reviewed = row.reviewed
                old_hash = row.definition_hash
                row.description, row.input_schema, row.annotations = remote.description, remote.input_schema, \
                    remote.annotations
                row.definition_hash, row.listed = remote.hash, True
                row.save()
                tool.description, tool.version, tool.registered = remote.description.strip(), version, True
                if row.reviewed_hash and row.reviewed_hash != remote.hash and tool.enabled:
                    tool.enabled = False
                    report.disabled.append(tool.name)
                tool.save()
                if old_hash != remote.hash:
                    report.changed.append(tool.name)
                    _audit(server, tool_name=tool.name, status="CHANGED", owner=tool.owner, version=version,
                           message=(f"MCP tool {tool.name}: definition changed on the server"
                                    + ("; disabled until reviewed again" if was_reviewed else "")),
                           details={"old_hash": old_hash, "new_hash": remote.hash,
                                    "reviewed_hash": row.reviewed_hash})
        for row in known.values():  # no longer listed: not offered, kept for the record
            if row.listed:
                row.listed = False
                row.save(update_fields=["listed", "updated_at"])
                Tool.objects.filter(pk=row.tool_id).update(registered=False)
                report.gone.append(row.tool.name)
    specs.forget()
    return report


def _add(server: McpServer, remote, version: str, report: DiscoveryReport) -> None:
    name = wire_name(server.name, remote.name)
    tool = Tool(name=name, description=remote.description.strip(), enabled=False, registered=True,
                source=server.source, owner=server.owner, version=version, tenant_id=server.tenant_id,
                default_risk=RiskLevel.HIGH, default_policy=ApprovalPolicy.REQUESTER)
    tool.save()
    McpTool.objects.create(server=server, tool=tool, remote_name=remote.name, description=remote.description,
                           input_schema=remote.input_schema, annotations=remote.annotations,
                           definition_hash=remote.hash)
    report.added.append(name)
    _audit(server, tool_name=name, status="CREATED", owner=tool.owner, version=version,
           message=f"MCP tool {name} discovered; disabled until reviewed",
           details={"new_hash": remote.hash})


@transaction.atomic
def tool_review(*, mcp_tool_id: int, reviewer) -> McpTool:
    """Approve the definition a remote tool has now and enable it (issue 14 item 2). Its risk stays
    HIGH (the registry's value for remote tools) unless an administrator overrides it on the Tool.
    For a tenant's own server the tenant's whitelist entry is created too. Audited with the hash.
    Raises McpTool.DoesNotExist; ValueError when the server no longer lists the tool."""
    row = McpTool.objects.select_for_update().select_related("server", "tool").get(pk=mcp_tool_id)
    if not row.listed:
        raise ValueError("the server no longer lists this tool")
    row.reviewed_hash, row.reviewed_by, row.reviewed_at = row.definition_hash, reviewer, clock.now()
    row.save(update_fields=["reviewed_hash", "reviewed_by", "reviewed_at", "updated_at"])
    tool = row.tool
    tool.enabled = True
    tool.save()
    if row.server.tenant_id is not None:
        TenantToolPolicy.objects.get_or_create(tenant_id=row.server.tenant_id, tool=tool, defaults={"enabled": True})
    _audit(row.server, tool_name=tool.name, status="CHANGED", actor_id=getattr(reviewer, "pk", None),
           owner=tool.owner, version=tool.version, message=f"MCP tool {tool.name} reviewed and enabled",
           details={"reviewed_hash": row.reviewed_hash})
    specs.forget(tool.name)
    return row


def servers_due_for_refresh() -> list[int]:
    """Ids of enabled servers whose tool list is older than their TTL (or never listed)."""
    now = clock.now()
    due = []
    for server in McpServer.objects.filter(enabled=True):
        if server.discovered_at is None or (now - server.discovered_at).total_seconds() >= server.tool_list_ttl_seconds:
            due.append(server.pk)
    return due
