"""Reading a bundle file: bounded, safe YAML into a checked structure (docs/policy.md).

A bundle file is YAML (or JSON, which is YAML) of this shape::

    version: 1                 # the file format; 1 is the only one
    cedar: |                   # Cedar policies, each with @id("...")
      ...
    limits:                    # optional
      - {id, tool, per, window_seconds, max_count?, max_sum?: {argument, value},
         when_exceeded: deny | approval, quorum?, mode?: enforce | shadow, reason?}

Defences: at most POLICY_BUNDLE_MAX_BYTES bytes (checked before parsing), no YAML anchors or
aliases (a "billion laughs" file is refused before it is expanded), no tags beyond YAML's safe
ones, at most MAX_NODES nodes, nested at most MAX_DEPTH levels.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

import yaml
from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.errors import BundleInvalid

MAX_NODES = 20_000
MAX_DEPTH = 50
RULE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


class MaxSum(BaseModel):
    """`max_sum`: the sum of one numeric argument over the window may not exceed `value`."""

    model_config = ConfigDict(extra="forbid")
    argument: str = Field(min_length=1, max_length=100)
    value: Decimal

    @field_validator("value", mode="before")
    @classmethod
    def _decimal(cls, value: Any) -> Decimal:
        try:
            amount = Decimal(str(value))
        except (InvalidOperation, ValueError):
            raise ValueError("must be a decimal number such as \"300.00\"") from None
        if not amount.is_finite() or amount <= 0 or amount > Decimal("1e15"):
            raise ValueError("must be a positive decimal number below 10^15")
        return amount


class Limit(BaseModel):
    """One limit over history (policies.limits): per tool and per key, over a sliding window."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=RULE_ID.pattern)
    tool: str = Field(min_length=1, max_length=100)
    per: str = Field(min_length=1, max_length=100, description="an argument name, `user` or `tenant`")
    window_seconds: int = Field(ge=1, le=366 * 86400)
    max_count: int | None = Field(default=None, ge=0, le=1_000_000)
    max_sum: MaxSum | None = None
    when_exceeded: Literal["deny", "approval"]
    quorum: int | None = Field(default=None, ge=1, le=9)
    mode: Literal["enforce", "shadow"] = "enforce"
    reason: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _consistent(self) -> "Limit":
        if self.max_count is None and self.max_sum is None:
            raise ValueError("a limit needs max_count, max_sum or both")
        if self.when_exceeded == "approval" and self.quorum is None:
            self.quorum = 1
        if self.when_exceeded == "deny" and self.quorum is not None:
            raise ValueError("quorum only applies to when_exceeded: approval")
        return self


class BundleDocument(BaseModel):
    """A bundle file, checked for shape (Cedar and the catalog are checked by policies.compiler)."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    cedar: str = Field(default="", max_length=2_000_000)
    limits: list[Limit] = Field(default_factory=list, max_length=500)

    @model_validator(mode="after")
    def _unique_limits(self) -> "BundleDocument":
        seen: set[str] = set()
        for limit in self.limits:
            if limit.id in seen:
                raise ValueError(f"limit id {limit.id!r} is used twice")
            seen.add(limit.id)
        return self


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases (so nothing is expanded) and counts nodes."""

    nodes = 0
    depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(None, None, "anchors and aliases are not allowed in a bundle", event.start_mark)
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise yaml.MarkedYAMLError(None, None, "anchors and aliases are not allowed in a bundle", event.start_mark)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise yaml.MarkedYAMLError(None, None, f"more than {MAX_NODES} YAML nodes", event.start_mark)
        if self.depth >= MAX_DEPTH:
            # the composer recurses once per level: a deeply nested file must not exhaust the stack
            raise yaml.MarkedYAMLError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def read_bundle(text: str | bytes) -> BundleDocument:
    """Parse and check the shape of a bundle file.

    text: the file (str, or bytes in UTF-8). Returns a BundleDocument. Raises BundleInvalid naming
    where the file is wrong: too large (over settings.POLICY_BUNDLE_MAX_BYTES bytes), not UTF-8,
    not YAML, anchors/aliases, an unknown key, a wrong type.
    """
    limit = settings.POLICY_BUNDLE_MAX_BYTES
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if len(raw) > limit:
        raise BundleInvalid([{"where": "file", "message": f"the bundle is {len(raw)} bytes; at most {limit} are accepted"}])
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleInvalid([{"where": "file", "message": f"not UTF-8 text ({exc.reason} at byte {exc.start})"}]) from None
    if "\x00" in decoded:
        raise BundleInvalid([{"where": "file", "message": "the file contains a NUL character"}])
    loader = _NoAliasLoader(decoded)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "file"
        problem = getattr(exc, "problem", None) or str(exc)
        raise BundleInvalid([{"where": where, "message": f"not valid YAML: {problem}"}]) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise BundleInvalid([{"where": "file", "message": "the bundle must be a mapping with `version`, `cedar` and `limits`"}])
    try:
        return BundleDocument.model_validate(data)
    except ValidationError as exc:
        raise BundleInvalid([
            {"where": ".".join(str(p) for p in e["loc"]) or "file", "message": _message(e)}
            for e in exc.errors(include_url=False, include_input=False)][:50]) from None


def _message(error: dict[str, Any]) -> str:
    """Pydantic's message for one error, said for a bundle's author where pydantic's is terse."""
    if error["type"] == "missing":
        return "is required" + (" (the file format: write `version: 1`)" if error["loc"] == ("version",) else "")
    if error["type"] == "extra_forbidden":
        return "is not a key of a bundle (keys: version, cedar, limits)" if len(error["loc"]) == 1 \
            else "is not a key here"
    return error["msg"]
