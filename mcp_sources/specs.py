"""ToolSpecs of remote tools, built from their reviewed Tool rows (the registry's provider, see
mcp_sources.apps), and the call of one remote tool inside the governed pipeline."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import transaction

from core.redaction.text import mask_json, mask_text
from mcp_sources import breaker
from mcp_sources.client import CallReply, ServerConfig, call_tool
from mcp_sources.models import McpServer, McpTool
from mcp_sources.schema import parameter_model
from mcp_sources.spec_cache import BUILT, LOCK, SPEC_TTL_SECONDS, SPECS
from mcp_sources.tasks import discover_server
from tools.context import ToolContext
from core.redaction.fields import mask_mapping
from tools.registry import ToolSpec
from tools.results import ToolResult

logger = logging.getLogger(__name__)

# A call whose request may have reached the server leaves this marker (shared cache) before it is
# sent; a second attempt with the same key finds it and answers OUTCOME_UNKNOWN without sending.
ATTEMPT_MARKER_SECONDS = 7 * 24 * 3600


def remote_spec(name: str) -> ToolSpec | None:
    """The registry's provider: the ToolSpec of the remote tool named `name`, or None.

    Risk is HIGH and the policy the registry's default for HIGH: the Tool row's overrides (set by
    an administrator) are applied on top by tools.policy, never the server's annotations."""
    if "__" not in name:
        return None
    now = time.monotonic()
    cached = SPECS.get(name)
    if cached is not None and cached[0] > now:
        return cached[1]
    row = McpTool.objects.select_related("server", "tool").filter(tool__name=name).first()
    spec = None
    # Only a tool whose current definition is the reviewed one has a spec (so it is never offered,
    # searched or called otherwise, whatever the Tool row says), and the spec is built from the
    # stored reviewed definition: the model reads exactly what the reviewer approved.
    if row is not None and not row.review_problem():
        # The same definition keeps the same spec (and parameter class): callers cache by it.
        key = (row.reviewed_hash, row.tool.owner, row.tool.version, row.server.name)
        built = BUILT.get(name)
        spec = built[1] if built is not None and built[0] == key else _build(row)
        BUILT[name] = (key, spec)
    with LOCK:
        SPECS[name] = (now + SPEC_TTL_SECONDS, spec)
    return spec


def _build(row: Any) -> ToolSpec | None:
    reviewed = row.reviewed_definition
    try:
        parameters = parameter_model(row.tool.name, reviewed["inputSchema"])
    except ValueError:
        logger.warning("MCP tool %s has an invalid input schema; not offered", row.tool.name)
        return None
    remote = RemoteCall(server_id=row.server_id, remote_name=reviewed["name"], reviewed_hash=row.reviewed_hash)
    return ToolSpec(
        name=row.tool.name, description=reviewed["description"] or reviewed["name"], parameters=parameters,
        title=str(reviewed.get("title") or ""),
        execute=_not_directly, risk="HIGH", owner=row.tool.owner, version=row.tool.version,
        source=row.server.source, remote=remote, result_converter=convert_result,
    )


def _not_directly(ctx: ToolContext, params: Any) -> Any:
    raise RuntimeError("a remote tool runs through RemoteCall.execute, inside the pipeline")


def convert_result(reply: CallReply) -> Any:
    """The same conversion as a local tool's: a dict for the model, personal data and secrets
    masked (by key and in free text); the pipeline caps items and bytes (tools.convert)."""
    data: Any = reply.structured
    if not isinstance(data, (dict, list)):
        data = {"content": "\n".join(reply.text)}
        if len(reply.text) == 1:  # many servers answer one JSON text block instead of structured content
            try:
                parsed = json.loads(reply.text[0])
            except ValueError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                data = parsed
    if isinstance(data, list):
        data = {"items": data}
    return mask_json(mask_mapping(data))


@dataclass(frozen=True)
class RemoteCall:
    """How the pipeline calls one remote tool (ToolSpec.remote).

    server_id: McpServer pk. remote_name: the tool's name on its server. reviewed_hash: the
    definition hash an administrator approved; the call is refused if the server now describes
    the tool differently."""

    server_id: int
    remote_name: str
    reviewed_hash: str

    def refusal(self) -> ToolResult | None:
        """TOOL_UNAVAILABLE (retryable) while the server is disabled or its breaker is open, else None.
        Checked before a confirmation is consumed: nothing is spent on a call that cannot go out."""
        if not McpServer.objects.filter(pk=self.server_id, enabled=True).exists():
            return ToolResult.failure("TOOL_UNAVAILABLE", "the tool's MCP server is disabled", retryable=True,
                                      terminal=False)
        if breaker.breaker_is_open(server_id=self.server_id):
            return ToolResult.failure(
                "TOOL_UNAVAILABLE", "the tool's MCP server is failing; it was not called. Try again later",
                retryable=True, terminal=False)
        return None

    def execute(self, ctx: ToolContext, arguments: dict[str, Any], *, key: str) -> ToolResult:
        """Send the call once and convert what came back into a ToolResult (never raises for the
        server's failures). `key`: the call's idempotency key; a marker under it is set in the
        shared cache before the request, so no later attempt (a retried transaction, a recovered
        run) sends it again: it is answered OUTCOME_UNKNOWN instead.
        """
        server = McpServer.objects.get(pk=self.server_id)
        if not cache.add(f"mcp-attempt:{key}", 1, timeout=ATTEMPT_MARKER_SECONDS):
            return ToolResult.failure(
                "OUTCOME_UNKNOWN", "an earlier attempt of this call may have reached the server; it was not sent "
                                   "again. An administrator must check it")
        reply = call_tool(ServerConfig.of(server), remote_name=self.remote_name, arguments=arguments,
                          reviewed_hash=self.reviewed_hash)
        if reply.list_changed:
            _refresh_after_commit(self.server_id)
        if reply.kind in ("UNAVAILABLE", "UNKNOWN"):
            breaker.breaker_failure(server_id=server.pk, threshold=server.breaker_failures,
                                    reset_seconds=server.breaker_reset_seconds)
        else:
            breaker.breaker_success(server_id=server.pk)
        if reply.kind == "OK" and not reply.is_error:
            return ToolResult.ok(convert_result(reply))
        if reply.kind == "OK":
            message = mask_text(" ".join(reply.text))[:300] or "the remote tool reported an error"
            return ToolResult.failure("REMOTE_TOOL_ERROR", message)
        if reply.kind in ("CHANGED", "MISSING"):
            return ToolResult.failure(
                "TOOL_DISABLED", "the server no longer describes this tool as it was reviewed; nothing was sent. "
                                 "It is disabled until an administrator reviews it again")
        if reply.kind == "UNAVAILABLE":
            return ToolResult.failure("TOOL_UNAVAILABLE", f"the tool's MCP server could not be reached "
                                      f"({reply.error}); nothing was sent", retryable=True, terminal=False)
        return ToolResult.failure(
            "OUTCOME_UNKNOWN", f"the request reached the server but no answer came ({reply.error}); it may have "
                               "run. It is not retried; an administrator must check it")


def _refresh_after_commit(server_id: int) -> None:
    """Re-discover the server once the caller's transaction commits (never inside it)."""
    transaction.on_commit(lambda: discover_server.delay(server_id=server_id))
