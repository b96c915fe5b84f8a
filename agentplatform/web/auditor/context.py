"""Template context for every page: whether the navigation shows the auditor's "Audit" link."""
from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from agentplatform.tenancy.roles import is_auditor


def auditor_nav(request: HttpRequest) -> dict:
    """{"is_auditor": lazy bool}: nothing runs until a template reads it (base.html, for
    signed-in people); then one permission lookup (cached per request by Django's auth backend)."""
    user = getattr(request, "user", None)
    return {"is_auditor": SimpleLazyObject(lambda: is_auditor(user)) if user is not None else False}
