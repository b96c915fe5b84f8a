"""Who may read the OpenAPI schema and Swagger UI."""
from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import BasePermission


class DocsPermission(BasePermission):
    """Everyone, unless `API_DOCS_REQUIRE_LOGIN` (default: on with DEPLOY_ENV=production) asks for a
    signed-in user (session or API key); an anonymous client then gets 401 NOT_AUTHENTICATED."""

    def has_permission(self, request, view) -> bool:
        return not settings.API_DOCS_REQUIRE_LOGIN or bool(request.user and request.user.is_authenticated)
