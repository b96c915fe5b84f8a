"""Result conversion limits, so a result never floods the model's context: at most 20 items and 32 KB of JSON."""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))


def limit_result(data: Any) -> Any:
    """Bound a converted result for the model.

    A dict with an `items` list keeps at most TOOLS_RESULT_MAX_ITEMS items and sets `total`,
    `returned` and `next_cursor` (kept when the tool set one). Anything still over
    TOOLS_RESULT_MAX_BYTES (bytes of compact UTF-8 JSON) loses items from the end, and a result
    that cannot fit is replaced by {"truncated": true, "bytes": N}.
    """
    max_items, max_bytes = settings.TOOLS_RESULT_MAX_ITEMS, settings.TOOLS_RESULT_MAX_BYTES
    if isinstance(data, list):
        data = {"items": data}
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        items = data["items"]
        total = data.get("total", len(items))
        data = {**data, "items": items[:max_items], "total": total}
        data["returned"] = len(data["items"])
        data.setdefault("next_cursor", None)
    size = _size(data)
    while size > max_bytes and isinstance(data, dict) and isinstance(data.get("items"), list) and data["items"]:
        data["items"] = data["items"][:-1]
        data["returned"] = len(data["items"])
        size = _size(data)
    if size > max_bytes:
        return {"truncated": True, "bytes": size}
    return data
