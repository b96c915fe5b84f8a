"""The per-process cache of remote tools' ToolSpecs (filled by mcp_sources.specs.remote_spec),
and `forget`, which discovery and review call so this process rebuilds what changed.

Kept apart from mcp_sources.specs so that discovery (mcp_sources.services) can empty it without
importing the remote call, which itself starts discovery.
"""
from __future__ import annotations

import threading

from tools.registry import ToolSpec

# How long a built spec is reused without reading its row again (seconds). Whether the tool is
# enabled is read live with the offered set; only its schema may be this old, and a call checks
# the server's definition against the reviewed hash anyway (mcp_sources.client.call_tool).
SPEC_TTL_SECONDS = 5.0
# name -> (monotonic expiry, spec or None)
SPECS: dict[str, tuple[float, ToolSpec | None]] = {}
# name -> (the reviewed definition's key, the spec built from it): the same definition keeps the
# same spec (and parameter class), which callers cache by.
BUILT: dict[str, tuple[tuple, ToolSpec | None]] = {}
LOCK = threading.Lock()


def forget(name: str | None = None) -> None:
    """Drop cached specs (all, or one name): called after discovery and review in this process."""
    with LOCK:
        if name is None:
            SPECS.clear()
            BUILT.clear()
        else:
            SPECS.pop(name, None)
