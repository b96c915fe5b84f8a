"""The Cedar schema of a tenant's tool catalog: one action per tool, its context typed from the
tool's parameter model (docs/policy.md, "The schema").

The catalog is handed in by the caller (tools.policy_catalog builds it from the registry), so
this module knows nothing of the tools app. A tool's context is::

    context.arguments   Record: each argument the policy language can type; money (`decimal` on
                        the parameter model) as Cedar `decimal`, strings (enums and dates too) as
                        String, integers as Long, booleans as Boolean, lists as Set, nested
                        objects as Record. An argument that may be absent (optional without a
                        default, or nullable) is optional (`has` guards it) unless the tool
                        fills it in for policy (`CatalogEntry.fills`); one with a default is
                        always there.
    context.risk        String: the tool's effective risk (LOW, MEDIUM, HIGH, CRITICAL).

The principal is `User::"<username>"`, the resource `Tool::"<tool name>"`; neither has attributes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A type tree: ("decimal",) ("long",) ("string",) ("bool",) ("set", item) ("record", {name: (type, required)})
CedarType = tuple


@dataclass(frozen=True)
class CatalogEntry:
    """One tool as policy sees it. name: wire name. json_schema: its parameter model's JSON Schema.
    decimals: argument names that are money or other exact decimals (Cedar `decimal`). fills:
    optional arguments the tool always fills in for policy (a full refund's amount). risk: its
    effective risk level."""

    name: str
    json_schema: dict[str, Any]
    decimals: frozenset[str] = frozenset()
    fills: frozenset[str] = frozenset()
    risk: str = "LOW"
    types: dict[str, tuple[CedarType, bool]] = field(default_factory=dict, compare=False)

    def arguments(self) -> dict[str, tuple[CedarType, bool]]:
        """Argument name -> (type tree, required) for the arguments Cedar can type (cached)."""
        if not self.types:
            self.types.update(_record(self.json_schema, self.json_schema.get("$defs", {}), self.decimals,
                                      self.fills))
        return self.types


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return defs.get(ref.rsplit("/", 1)[1], {})
    return node


def _type(node: dict[str, Any], defs: dict[str, Any], decimal: bool, depth: int = 0) -> tuple[CedarType | None, bool]:
    """(type tree or None when Cedar cannot type it, nullable)."""
    if depth > 8:
        return None, False
    node = _resolve(node, defs)
    variants = node.get("anyOf") or node.get("oneOf")
    if variants:
        kinds = [_resolve(v, defs) for v in variants]
        nullable = any(k.get("type") == "null" for k in kinds)
        rest = [k for k in kinds if k.get("type") != "null"]
        if decimal and rest:
            return ("decimal",), nullable
        typed = {_type(k, defs, False, depth + 1)[0] for k in rest}
        return (typed.pop() if len(typed) == 1 else None), nullable
    kind = node.get("type")
    if decimal and kind in ("number", "integer", "string"):
        return ("decimal",), False
    if kind == "string" or ("enum" in node and all(isinstance(v, str) for v in node["enum"])):
        return ("string",), False
    if kind == "integer":
        return ("long",), False
    if kind == "number":
        return ("decimal",), False
    if kind == "boolean":
        return ("bool",), False
    if kind == "array":
        item, _ = _type(node.get("items") or {}, defs, False, depth + 1)
        return (("set", item) if item else None), False
    if kind == "object" and "properties" in node:
        return ("record", _record(node, defs, frozenset(), frozenset(), depth + 1)), False
    return None, False


def _record(node: dict[str, Any], defs: dict[str, Any], decimals: frozenset[str], fills: frozenset[str],
            depth: int = 0) -> dict[str, tuple[CedarType, bool]]:
    required = set(node.get("required", ()))
    out: dict[str, tuple[CedarType, bool]] = {}
    for name, prop in (node.get("properties") or {}).items():
        typed, nullable = _type(prop, defs, name in decimals, depth)
        # A validated call always carries an argument with a non-null default (the parameter
        # model fills it in), so rules may read it without a `has` guard.
        present = name in required or prop.get("default") is not None
        if typed is not None:
            out[name] = (typed, name in fills or (present and not nullable))
    return out


def _schema_type(typed: CedarType) -> dict[str, Any]:
    kind = typed[0]
    if kind == "decimal":
        return {"type": "Extension", "name": "decimal"}
    if kind == "long":
        return {"type": "Long"}
    if kind == "string":
        return {"type": "String"}
    if kind == "bool":
        return {"type": "Boolean"}
    if kind == "set":
        return {"type": "Set", "element": _schema_type(typed[1])}
    return {"type": "Record", "attributes": {
        name: {**_schema_type(t), "required": req} for name, (t, req) in typed[1].items()}}


def cedar_schema(catalog: dict[str, CatalogEntry]) -> dict[str, Any]:
    """The Cedar schema (JSON form) of `catalog` (tool name -> CatalogEntry): entity types User and
    Tool, one action per tool with its typed context. Returns a dict for cedarpy."""
    actions = {}
    for name, entry in sorted(catalog.items()):
        arguments = {arg: {**_schema_type(t), "required": req} for arg, (t, req) in entry.arguments().items()}
        actions[name] = {"appliesTo": {"principalTypes": ["User"], "resourceTypes": ["Tool"], "context": {
            "type": "Record", "attributes": {
                "arguments": {"type": "Record", "attributes": arguments},
                "risk": {"type": "String"},
            }}}}
    return {"": {"entityTypes": {"User": {}, "Tool": {}}, "actions": actions}}
