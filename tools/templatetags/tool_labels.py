"""`{% load tool_labels %}{{ name|tool_label }}`: a tool's title for people in templates of the
apps below `tools` (approvals), which may not import it (the layers in .importlinter)."""
from __future__ import annotations

from django import template

from tools.display import tool_label as _tool_label

register = template.Library()


@register.filter
def tool_label(name: str) -> str:
    """The tool's bilingual title, or its humanized name (tools.display.tool_label)."""
    return _tool_label(str(name or ""))
