"""`tools/list` over MCP: the tools offered to the key's user now, exactly the set a chat of that
user is offered (tools.selectors.offered_tools: registered, enabled globally and for the tenant,
`use_tool` and the tool's own permission held), each with its reviewed description and parameter
schema (the definition the model reads in the chat), a title people read, and MCP tool annotations
derived from our registry and the tenant's effective policy, never from a tool's self-description.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import mcp_types as types

from tools.display import humanize
from tools.levels import RiskLevel
from tools.policy import effective_policy
from tools.selectors import offered_tools

# Risk levels whose calls MCP clients should treat as destructive (`destructiveHint`).
DESTRUCTIVE = frozenset({RiskLevel.HIGH, RiskLevel.CRITICAL})


def _annotations(spec: Any, row: Any) -> types.ToolAnnotations:
    """readOnlyHint from the registry's `read_only`; destructiveHint for HIGH and CRITICAL under the
    tenant's effective policy (a tenant may raise a tool's risk); idempotentHint for read-only tools
    and tools with an idempotency key (a repeat replays the stored result); openWorldHint for a tool
    served by a remote MCP server (it reaches outside the platform)."""
    risk = effective_policy(spec, row).risk
    return types.ToolAnnotations(
        read_only_hint=bool(spec.read_only),
        destructive_hint=(not spec.read_only) and risk in DESTRUCTIVE,
        idempotent_hint=bool(spec.read_only or spec.idempotency_key is not None),
        open_world_hint=str(spec.source).startswith("mcp:"),
    )


def _may_wait(spec: Any, row: Any) -> bool:
    """True when the tool's calls may wait for a decision: gated by its effective policy, or HIGH or
    CRITICAL (a tenant's policy rules may gate those per call)."""
    policy = effective_policy(spec, row)
    return policy.gated or policy.risk in DESTRUCTIVE


def offered_listing(user: Any) -> list[types.Tool]:
    """The MCP Tool entries offered to `user` now, sorted by name (runs queries: call it in a
    thread). A user without a tenant, or inactive, is offered nothing."""
    listed = []
    for name, (spec, row) in sorted(offered_tools(user=user).items()):
        function = spec.definition()["function"]
        listed.append(types.Tool(
            name=name,
            title=spec.title or humanize(name),
            description=function["description"],
            input_schema=function["parameters"],
            annotations=_annotations(spec, row),
            # A call that may wait for people may run as an MCP task (2025-11-25 clients).
            execution=types.ToolExecution(task_support="optional") if _may_wait(spec, row) else None,
        ))
    return listed


def fingerprint(listed: list[types.Tool]) -> str:
    """A SHA-256 of what a client reads of a listing (names, titles, descriptions, schemas,
    annotations): equal fingerprints mean the client's list is still right."""
    dumped = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed]
    return hashlib.sha256(json.dumps(dumped, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
