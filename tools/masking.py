"""Masking of personal data and secrets before anything reaches the model, logs or audit rows."""
from __future__ import annotations

import re
from typing import Any

from agentplatform.redaction import mask_text

SECRET_KEYS = re.compile(r"(token|secret|password|api[_-]?key|authorization|card|cvv|id_?number)", re.I)
PHONE_KEYS = re.compile(r"phone|mobile|tel", re.I)
ADDRESS_KEYS = re.compile(r"address|addr", re.I)
# Long digit runs (cards, ids): used by agentplatform.llm.client for provider error texts; free
# text in general goes through agentplatform.redaction.mask_text.
LONG_DIGITS = re.compile(r"(?<![\w])\d{13,19}(?![\w])")


def mask_phone(value: str) -> str:
    """'13812345678' -> '138****5678'; short values keep only the last 2 characters."""
    digits = str(value)
    if len(digits) >= 7:
        return digits[:3] + "****" + digits[-4:]
    return "*" * max(len(digits) - 2, 0) + digits[-2:]


def mask_address(value: str) -> str:
    """Keep the first 6 characters (city/district), hide the rest."""
    text = str(value)
    return text[:6] + "****" if len(text) > 6 else "****"


def mask_value(key: str, value: Any) -> Any:
    """Mask one value by its key name; long digit runs (cards, ids) are masked in any string."""
    if isinstance(value, dict):
        return mask_mapping(value)
    if isinstance(value, list):
        return [mask_value(key, v) for v in value]
    if not isinstance(value, str):
        return value
    if SECRET_KEYS.search(key):
        return "****"
    if PHONE_KEYS.search(key):
        return mask_phone(value)
    if ADDRESS_KEYS.search(key):
        return mask_address(value)
    # Free text under any other key: cards, national ids, phones and tokens wherever they appear.
    return mask_text(value)


def mask_mapping(data: dict[str, Any]) -> dict[str, Any]:
    """Return a masked copy of a mapping (recursively)."""
    return {k: mask_value(k, v) for k, v in data.items()}
