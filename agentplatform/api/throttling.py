"""Per-user request rates on the endpoints that cost the most or guard secrets.

DRF's ScopedRateThrottle with the rates read from `settings.API_THROTTLE_RATES` at each request
(scope -> "N/second|minute|hour|day", or None for no limit), so a deployment sets them from the
environment (`API_THROTTLE_CHAT`, ...; docs/operations.md) and tests can change them. A request
over the rate answers 429 THROTTLED (retryable) with `Retry-After` in seconds. Counters live in
the Django cache (per process with the default local-memory cache; shared with `CACHE_URL`).
"""
from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import ScopedRateThrottle


class ApiScopeThrottle(ScopedRateThrottle):
    """Counts requests per (view.throttle_scope, user id or client IP). OPTIONS and HEAD are not
    counted: they do none of the work a scope limits, and a client's (or a browser's CORS)
    preflights must not use up the allowance of the requests that follow."""

    uncounted_methods = ("OPTIONS", "HEAD")

    def allow_request(self, request, view) -> bool:
        if request.method in self.uncounted_methods:
            return True
        return super().allow_request(request, view)

    def get_rate(self) -> str | None:
        return settings.API_THROTTLE_RATES.get(self.scope)
