"""Template context for the people's pages: what the navigation may offer the signed-in person."""
from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from tools.selectors import offered_tools


def people_nav(request: HttpRequest) -> dict:
    """{"people_nav": lazy {"may_use_tools": bool}}: whether any tool is offered to the user now
    (then "My requests" is worth a link). Lazy: one query, only when a template reads it."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or getattr(user, "tenant_id", None) is None:
        return {"people_nav": {"may_use_tools": False}}
    return {"people_nav": SimpleLazyObject(lambda: {"may_use_tools": bool(offered_tools(user=user))})}
