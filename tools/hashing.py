"""Canonical JSON and hashes of tool arguments: the binding of a call to its decision.

Canonical form: sorted keys, no spaces, UTF-8 (ensure_ascii=False). Reordering keys or
changing whitespace in the model's arguments gives the same hash.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of `value` (sorted keys, separators without spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def arguments_hash(value: Any) -> str:
    """Return the hex SHA-256 of the canonical JSON of `value` (64 characters)."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def key_hash(*parts: object) -> str:
    """Return the hex SHA-256 of the parts joined with ':' (the shape of an idempotency key)."""
    return hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).hexdigest()
