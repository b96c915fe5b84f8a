"""Template filter `tool_label`: what people read for a tool (its title, never its wire name).

    {% load tool_titles %}{{ row.tool_name|tool_label }}

Lets pages of lower layers (approvals) show the title without importing tools.
"""
from __future__ import annotations

from django import template

from tools.display import tool_label as _tool_label

register = template.Library()


@register.filter
def tool_label(name: str) -> str:
    """tools.display.tool_label(name): the bilingual title, or a readable name (no query)."""
    return _tool_label(str(name or ""))
