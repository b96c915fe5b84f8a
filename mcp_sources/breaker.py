"""A circuit breaker per MCP server, kept in the Django cache so every process
sharing the cache (CACHE_URL, Redis in production) sees the same state; with the default
per-process cache each process keeps its own.

Closed: calls go through, consecutive failures are counted. After `threshold` failures it opens:
for `reset_seconds` calls are answered TOOL_UNAVAILABLE (retryable) without contacting the server.
Then one call is let through (half-open): a success closes it, a failure opens it again at once.
"""
from __future__ import annotations

from django.core.cache import cache


def _keys(server_id: int) -> tuple[str, str]:
    return f"mcp-breaker:open:{server_id}", f"mcp-breaker:failures:{server_id}"


def breaker_is_open(*, server_id: int) -> bool:
    """True while the server's breaker is open (calls must not reach it)."""
    return cache.get(_keys(server_id)[0]) is not None


def breaker_failure(*, server_id: int, threshold: int, reset_seconds: int) -> bool:
    """Count one failure (unreachable, timed out, protocol error); return True when this opened the breaker."""
    opened, failures = _keys(server_id)
    cache.add(failures, 0, timeout=None)
    try:
        count = cache.incr(failures)
    except ValueError:  # evicted meanwhile
        cache.set(failures, 1, timeout=None)
        count = 1
    if count < max(1, threshold):
        return False
    cache.set(opened, 1, timeout=max(1, reset_seconds))
    cache.set(failures, max(0, threshold - 1), timeout=None)  # half-open after the reset: one failure re-opens
    return True


def breaker_success(*, server_id: int) -> None:
    """A call went through: close the breaker and forget earlier failures."""
    opened, failures = _keys(server_id)
    cache.delete_many([opened, failures])
