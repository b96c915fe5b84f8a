"""`Cache-Control` for what only one person may see.

Approval cards, a conversation, a requester's requests, API answers: a browser or a shared
proxy must not keep them, or the back button shows them again after sign-out and another user of
the same machine can read them. Pages of a signed-in user and everything under /api/ that set no
`Cache-Control` of their own get `private, no-store` (RFC 9111 section 5.2.2.5: no-store; 5.2.2.7:
private). Static files (whitenoise answers them earlier) and anonymous pages keep their caching.
"""
from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

API_PREFIX = "/api/"


class PrivateNoStoreMiddleware:
    """Adds `Cache-Control: private, no-store` to responses for a signed-in user or under /api/
    (module docstring). Install after AuthenticationMiddleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        personal = request.path.startswith(API_PREFIX) or bool(getattr(user, "is_authenticated", False))
        if personal and not response.has_header("Cache-Control"):
            patch_cache_control(response, private=True, no_store=True)
        return response
