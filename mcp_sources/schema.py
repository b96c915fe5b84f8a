"""A remote tool's definition in our terms: its wire name, the hash of what was reviewed, and a
parameter model that validates arguments against the server's `inputSchema` with a JSON Schema
validator (jsonschema), unknown properties refused."""
from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, model_validator

_WIRE = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(server: str, remote_name: str) -> str:
    """The name the model sees: `<server>__<tool>`, only [a-zA-Z0-9_-], at most 64 characters (the
    OpenAI limit); a longer one keeps a hash suffix so two tools never share a name."""
    name = f"{server}__{_WIRE.sub('_', remote_name)}"
    if len(name) > 64:
        name = name[:55] + "_" + hashlib.sha256(remote_name.encode()).hexdigest()[:8]
    return name


def definition_hash(*, name: str, description: str | None, input_schema: dict[str, Any] | None) -> str:
    """SHA-256 (hex) of the canonical JSON (sorted keys, no spaces, UTF-8) of what a reviewer
    approves: the tool's remote name, description and input schema. A lone surrogate (a server
    may send one as a JSON escape) is hashed as its code point, so such a definition still gets a
    hash and is refused by the checks (mcp_sources.vetting) instead of failing the whole listing."""
    text = json.dumps({"name": name, "description": description or "", "inputSchema": input_schema or {}},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def strict_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """The server's input schema with unknown properties refused: every object schema that declares
    `properties` and does not say otherwise gets `additionalProperties: false`, the root always.
    Returns a new dict; raises ValueError for a schema that is not a valid JSON Schema object."""
    result = copy.deepcopy(schema) if isinstance(schema, dict) else {}
    result.setdefault("type", "object")
    result.setdefault("properties", {})

    def tighten(node: Any, root: bool = False) -> None:
        if isinstance(node, dict):
            if root or ("properties" in node and "additionalProperties" not in node):
                node["additionalProperties"] = False
            for key, value in node.items():
                if key in ("properties", "$defs", "definitions", "patternProperties"):
                    for sub in (value or {}).values():
                        tighten(sub)
                elif key in ("items", "additionalItems", "not", "if", "then", "else"):
                    tighten(value)
                elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                    for sub in value or []:
                        tighten(sub)

    tighten(result, root=True)
    result.pop("title", None)
    try:
        Draft202012Validator.check_schema(result)
    except SchemaError as exc:
        raise ValueError(f"the server's input schema is not valid JSON Schema: {exc.message}") from None
    return result


class RemoteArguments(BaseModel):
    """Base of the parameter model of one remote tool (built by `parameter_model`): the arguments
    are kept as given (extras) once the JSON Schema validator accepted them."""

    model_config = ConfigDict(extra="allow")
    _schema: dict[str, Any] = {}
    _validator: Any = None

    @model_validator(mode="before")
    @classmethod
    def _validate_schema(cls, data: Any) -> Any:
        errors = sorted(cls._validator.iter_errors(data), key=lambda e: list(e.absolute_path))[:20]
        if errors:
            raise ValueError("; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:200]}" for e in errors))
        return data

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # noqa: D102 - what the model sees
        return copy.deepcopy(cls._schema)


def parameter_model(name: str, input_schema: dict[str, Any] | None) -> type[RemoteArguments]:
    """A pydantic model class for the tool's arguments: validation by the strict JSON Schema
    (`strict_schema`), `model_json_schema()` returns that schema, `model_dump()` the arguments.
    Raises ValueError for an invalid schema."""
    schema = strict_schema(input_schema)
    model = type(f"Remote_{name}", (RemoteArguments,), {"__module__": __name__})
    model._schema = schema
    model._validator = Draft202012Validator(schema)
    return model
