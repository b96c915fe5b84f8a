"""Running the platform's synchronous services from the MCP server's event loop.

Each call runs in a worker thread of anyio's pool (not Django's single thread-sensitive thread, so
one call waiting on a row lock does not hold up every other session), and the thread's database
connection is handled as Django handles it around a request: stale or broken connections are
closed before and after (CONN_MAX_AGE).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from django.db import close_old_connections

T = TypeVar("T")


def _with_connections(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await fn(*args, **kwargs) run in a worker thread; returns its value, raises what it raises.
    Cancelling the awaiting task abandons the wait, not the thread (the call finishes)."""
    return await anyio.to_thread.run_sync(functools.partial(_with_connections, fn, *args, **kwargs))
