"""Writes on MCP sources: discovery (mirror a server's tools into disabled HIGH-risk Tool rows,
disable a reviewed tool whose definition changed) and review (enable the reviewed definition).
The network is never touched inside a transaction: discovery lists first, then writes."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction

from core import clock
from core.redaction.endpoints import scrub_urls
from core.errors import ConflictError, PermissionDeniedError
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import is_platform_operator
from core.text import storable_text
from audit import events
from mcp_sources.client import Listing, McpUnavailable, RemoteTool, ServerConfig, list_tools
from mcp_sources.models import McpServer, McpTool
from mcp_sources.schema import wire_name
from mcp_sources.spec_cache import forget
from mcp_sources.vetting import definition_problems
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
    refused: list[str] = field(default_factory=list)
    error: str = ""


class ReviewRefused(ConflictError):
    """A review that cannot be recorded: the definition changed since it was shown
    (DEFINITION_CHANGED), it was refused at discovery (DEFINITION_REFUSED), or the server no longer
    lists the tool (TOOL_NOT_LISTED). Nothing was changed."""

    code = "REVIEW_REFUSED"


def _storable(value):
    """`value` (JSON-like) with every string and key storable in PostgreSQL (NUL and lone
    surrogates become U+FFFD, core.text): a refused definition is still kept for the
    reviewer to look at; its hash is of what the server sent."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def _stored_name(remote_name: str) -> str:
    """The remote name as stored (and matched on the next discovery)."""
    return storable_text(remote_name)[:200]


def _refusal(remote: RemoteTool) -> str:
    """Why the listed definition is refused (mcp_sources.vetting), "" when it passes."""
    return "; ".join(definition_problems(name=remote.name, description=remote.description,
                                         input_schema=remote.input_schema))[:4000]


def _listed_twice(listing: Listing) -> dict[str, str]:
    """{stored name: refusal} of the names a listing gives more than one definition: which one the
    server runs is unknown, so none of them may be reviewed (the tool stays disabled until the
    server lists the name once)."""
    hashes: dict[str, set[str]] = {}
    for remote in listing.tools:
        hashes.setdefault(_stored_name(remote.name), set()).add(remote.hash)
    return {name: f"the server lists this name with {len(found)} different definitions; which one it runs "
                  f"is unknown" for name, found in hashes.items() if len(found) > 1}


def _tenants(server: McpServer) -> list[int]:
    """The tenants whose audit trail records a change of this server's tools."""
    if server.tenant_id is not None:
        return [server.tenant_id]
    return list(Tenant.objects.order_by("pk").values_list("pk", flat=True))


def _audit(server: McpServer, *, tool_name: str, status: str, message: str, details: dict,
           actor_id: int | None = None, owner: str = "", version: str = "") -> None:
    for tenant_id in _tenants(server):
        events.control_change_recorded(tenant_id=tenant_id, status=status,
                      actor_id=actor_id, tool_name=tool_name, tool_owner=owner, tool_version=version,
                      masked_arguments={"object": {"type": "mcp_tool", "id": tool_name}, "server": server.name,
                                        **details},
                      message=message)


def _version(listing: Listing, definition: str) -> str:
    """A remote tool's version: the server's version and the first 12 hex digits of its definition
    hash, so any change of name, description or schema is a new version."""
    return f"{(listing.server_version or '0')[:40]}+{definition[:12]}"


def server_discover(*, server_id: int) -> DiscoveryReport:
    """List the server's tools and mirror them into Tool rows. Returns a DiscoveryReport.

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
        report.error = scrub_urls(str(error))[:500]  # shown to a tenant administrator on the server's row
        McpServer.objects.filter(pk=server.pk).update(last_error=report.error)
        return report
    with transaction.atomic(durable=not transaction.get_connection().in_atomic_block):
        server = McpServer.objects.select_for_update().get(pk=server_id)
        server.protocol_version = listing.protocol_version[:32]
        server.server_name, server.server_version = listing.server_name[:200], listing.server_version[:64]
        server.discovered_at, server.last_error = clock.now(), ""
        server.save(update_fields=["protocol_version", "server_name", "server_version", "discovered_at",
                                   "last_error", "updated_at"])
        # Locked, so a review committing meanwhile is read, not overwritten with what was read before it.
        known = {t.remote_name: t for t in McpTool.objects.select_for_update(of=("self",)).select_related("tool")
                 .filter(server=server).order_by("pk")}
        ambiguous = _listed_twice(listing)
        seen: set[str] = set()
        for remote in listing.tools:
            if _stored_name(remote.name) in seen:  # one row per name: the first listed stands for all
                continue
            seen.add(_stored_name(remote.name))
            version = _version(listing, remote.hash)
            refusal = "; ".join(filter(None, [ambiguous.get(_stored_name(remote.name), ""), _refusal(remote)]))[:4000]
            if refusal:
                report.refused.append(wire_name(server.name, remote.name))
            row = known.pop(_stored_name(remote.name), None)
            if row is None:
                _add(server, remote, version, report, refusal=refusal)
                continue
            tool = row.tool
            if row.definition_hash != remote.hash or not row.listed or row.refusal != refusal:
                was_reviewed = row.reviewed
                old_hash = row.definition_hash
                row.description, row.input_schema = storable_text(remote.description), _storable(remote.input_schema)
                row.annotations = _storable(remote.annotations)
                row.definition_hash, row.listed, row.refusal = remote.hash, True, refusal
                row.save()
                tool.description, tool.version, tool.registered = row.description.strip(), version, True
                # Enabled only while the definition is the reviewed one (McpTool.review_problem);
                # the Tool row refuses to be saved enabled otherwise.
                if tool.enabled and row.review_problem():
                    tool.enabled = False
                    report.disabled.append(tool.name)
                tool.save()
                if old_hash != remote.hash:
                    report.changed.append(tool.name)
                    _audit(server, tool_name=tool.name, status="CHANGED", owner=tool.owner, version=version,
                           message=(f"MCP tool {tool.name}: definition changed on the server"
                                    + ("; disabled until reviewed again" if was_reviewed else "")
                                    + ("; refused: " + refusal[:300] if refusal else "")),
                           details={"old_hash": old_hash, "new_hash": remote.hash,
                                    "reviewed_hash": row.reviewed_hash, "refused": bool(refusal)})
        for row in known.values():  # no longer listed: not offered, kept for the record
            if row.listed:
                row.listed = False
                row.save(update_fields=["listed", "updated_at"])
                Tool.objects.filter(pk=row.tool_id).update(registered=False)
                report.gone.append(row.tool.name)
    forget()
    return report


def _add(server: McpServer, remote: RemoteTool, version: str, report: DiscoveryReport, *, refusal: str) -> None:
    name = wire_name(server.name, remote.name)
    if Tool.objects.filter(name=name).exists():  # two remote names that map to one wire name
        name = name[:55] + "_" + remote.hash[:8]
    description = storable_text(remote.description)
    tool = Tool(name=name, description=description.strip(), enabled=False, registered=True,
                source=server.source, owner=server.owner, version=version, tenant_id=server.tenant_id,
                default_risk=RiskLevel.HIGH, default_policy=ApprovalPolicy.REQUESTER)
    tool.save()
    McpTool.objects.create(server=server, tool=tool, remote_name=_stored_name(remote.name), description=description,
                           input_schema=_storable(remote.input_schema), annotations=_storable(remote.annotations),
                           definition_hash=remote.hash, refusal=refusal)
    report.added.append(name)
    _audit(server, tool_name=name, status="CREATED", owner=tool.owner, version=version,
           message=f"MCP tool {name} discovered; " + (f"refused: {refusal[:300]}" if refusal
                                                      else "disabled until reviewed"),
           details={"new_hash": remote.hash, "refused": bool(refusal)})


@transaction.atomic(durable=True)
def tool_review(*, mcp_tool_id: int, reviewer, definition_hash: str) -> McpTool:
    """Approve the definition the reviewer was shown and enable the tool (docs/remote_tools.md).

    definition_hash: the hash of the definition displayed to the reviewer (the review page carries
    it in its form). The review is recorded only if the tool's current definition still has that
    hash: a server that changed the tool between the page and the click gets nothing approved. The
    definition itself is stored as `reviewed_definition`: the model is sent that, nothing else.
    Its risk stays HIGH (the registry's value for remote tools) unless an administrator overrides it
    on the Tool. For a tenant's own server the tenant's whitelist entry is created too. Audited
    with the hash.
    Raises McpTool.DoesNotExist; PermissionDeniedError when `reviewer` is not a platform operator;
    ReviewRefused (code DEFINITION_CHANGED, DEFINITION_REFUSED or TOOL_NOT_LISTED), nothing changed.
    """
    if reviewer is None or not is_platform_operator(reviewer):
        raise PermissionDeniedError("only a platform operator reviews a remote tool's definition")
    row = McpTool.objects.select_for_update().select_related("server", "tool").get(pk=mcp_tool_id)
    if not row.listed:
        raise ReviewRefused("the server no longer lists this tool", code="TOOL_NOT_LISTED")
    if row.refusal:
        raise ReviewRefused(f"this definition was refused at discovery and cannot be reviewed: {row.refusal}",
                            code="DEFINITION_REFUSED")
    if not definition_hash or definition_hash != row.definition_hash:
        raise ReviewRefused(
            "the definition changed since it was shown to you; nothing was approved. Look at it again "
            "/ 工具定义在您查看之后已更改，未作任何批准，请重新查看", code="DEFINITION_CHANGED")
    row.reviewed_hash, row.reviewed_by, row.reviewed_at = row.definition_hash, reviewer, clock.now()
    row.reviewed_definition = row.current_definition()
    problem = row.review_problem()
    if problem:  # e.g. a stored definition that no longer hashes to its hash
        raise ReviewRefused(problem, code="DEFINITION_REFUSED")
    row.save(update_fields=["reviewed_hash", "reviewed_definition", "reviewed_by", "reviewed_at", "updated_at"])
    tool = row.tool
    tool.enabled = True
    tool.save()
    if row.server.tenant_id is not None:
        TenantToolPolicy.objects.get_or_create(tenant_id=row.server.tenant_id, tool=tool, defaults={"enabled": True})
    _audit(row.server, tool_name=tool.name, status="CHANGED", actor_id=getattr(reviewer, "pk", None),
           owner=tool.owner, version=tool.version, message=f"MCP tool {tool.name} reviewed and enabled",
           details={"reviewed_hash": row.reviewed_hash})
    forget(tool.name)
    return row


def servers_due_for_refresh() -> list[int]:
    """Ids of enabled servers whose tool list is older than their TTL (or never listed)."""
    now = clock.now()
    due = []
    for server in McpServer.objects.filter(enabled=True):
        if server.discovered_at is None or (now - server.discovered_at).total_seconds() >= server.tool_list_ttl_seconds:
            due.append(server.pk)
    return due
