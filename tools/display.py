"""What people read for a tool: its title, never its wire name or source prefix."""
from __future__ import annotations

from tools.registry import registry


def humanize(name: str) -> str:
    """A readable label from a wire name: the part after an MCP source's `server__` prefix, with
    underscores as spaces and the first letter capitalised ("logistics__track_shipment" ->
    "Track shipment"). "" for an empty name."""
    bare = name.rsplit("__", 1)[-1].replace("_", " ").strip()
    return bare[:1].upper() + bare[1:]


def tool_label(name: str) -> str:
    """The bilingual title of the tool `name` defined in code ("Refund an order / 订单退款"), or
    humanize(name) for a remote tool, a tool without a title or one no longer registered. Runs no
    query; never raises."""
    spec = next((s for s in registry.all() if s.name == name), None)
    title = spec.title if spec is not None else ""
    return title or humanize(name)
