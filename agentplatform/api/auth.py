"""API key authentication: django-rest-knox's digest-only tokens, plus when each key was last used."""
from __future__ import annotations

import datetime

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from knox.auth import TokenAuthentication
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header


class ApiKeyAuthentication(TokenAuthentication):
    """`Authorization: Token <key>` against ApiKey digests (knox: constant-time compare, expired
    keys deleted on sight). A successful use stamps `last_used_at`, with one conditional UPDATE at
    most every API_KEY_LAST_USED_RESOLUTION_SECONDS per key, so a busy client costs no write per
    request. Raises AuthenticationFailed (401) for an unknown, expired or revoked key, and
    NotAuthenticated (401 NOT_AUTHENTICATED, the code of a request without credentials) naming the
    expected scheme for an Authorization header of another scheme (`Bearer …`, `Basic …`); the
    response's `WWW-Authenticate: Token` comes from `authenticate_header`."""

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        scheme = self.authenticate_header(request)
        if header and header[0].lower() != scheme.lower().encode():
            # The header's words are not repeated: a client that sends a bare key would see it echoed.
            raise exceptions.NotAuthenticated(
                f"this API expects the {scheme} scheme: `Authorization: {scheme} <key>` (not Bearer or another "
                "scheme); a key comes from POST /api/v1/api-keys/ (signed in) or from your administrator")
        return super().authenticate(request)

    def validate_user(self, auth_token):
        user, key = super().validate_user(auth_token)
        now = timezone.now()
        stale = now - datetime.timedelta(seconds=settings.API_KEY_LAST_USED_RESOLUTION_SECONDS)
        if key.last_used_at is None or key.last_used_at < stale:
            type(key).objects.filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale),
                                     pk=key.pk).update(last_used_at=now)
            key.last_used_at = now
        return user, key


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of ApiKeyAuthentication: the same `tokenAuth` scheme drf-spectacular
    gave DRF's TokenAuthentication before (clients and the schema keep their shape)."""

    target_class = ApiKeyAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": 'API key: `Authorization: Token <key>` (issued once by POST /api/v1/api-keys/ '
                               'or `manage.py issue_api_token`)'}
