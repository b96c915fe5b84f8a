"""The client factory: one `openai.OpenAI` SDK client per set of LLM_* settings, process-wide.

`get_client()` builds the SDK client from settings (`LLM_BASE_URL`, `LLM_API_KEY`,
`LLM_TIMEOUT_SECONDS`, `LLM_MAX_RETRIES`). With no `LLM_API_KEY` it points the same SDK at the
embedded offline model (`agentplatform.llm.offline`) through an in-process httpx2 transport, so the
code path is identical with and without a network (the SDK request, the SSE stream, the assembly;
only the model-call thread is left out for it: `in_process`).
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

import httpx2
import openai
from django.conf import settings

from agentplatform.llm.offline import OfflineModelTransport

OFFLINE_BASE_URL = "http://offline-model.invalid/v1"
# The SDK refuses to build a client without a key; the offline transport never looks at it.
OFFLINE_API_KEY = "offline"

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], openai.OpenAI] = {}
# Clients whose transport is the in-process offline model (no network under them).
_in_process: weakref.WeakSet = weakref.WeakSet()


def _settings_key() -> tuple[Any, ...]:
    return (settings.LLM_BASE_URL, settings.LLM_API_KEY, float(settings.LLM_TIMEOUT_SECONDS),
            int(settings.LLM_MAX_RETRIES))


def _build_client(base_url: str, api_key: str, timeout: float, max_retries: int) -> openai.OpenAI:
    if not api_key:
        client = openai.OpenAI(api_key=OFFLINE_API_KEY, base_url=OFFLINE_BASE_URL, timeout=timeout,
                               max_retries=max_retries,
                               http_client=httpx2.Client(transport=OfflineModelTransport()))
        _in_process.add(client)
        return client
    return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)


def get_client() -> openai.OpenAI:
    """Return the process-wide SDK client for the current LLM_* settings.

    Cached per (LLM_BASE_URL, LLM_API_KEY, LLM_TIMEOUT_SECONDS, LLM_MAX_RETRIES), so a test that
    overrides those settings gets a matching client. An empty LLM_API_KEY selects the offline
    planner (base_url OFFLINE_BASE_URL, in-process OfflineModelTransport, no network).
    Raises nothing itself; a malformed setting surfaces as the SDK's own error.
    """
    key = _settings_key()
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _build_client(*key)
        return client


def in_process(client: openai.OpenAI) -> bool:
    """True for a client built here for the offline model: its transport answers in-process and
    never waits on a network, so `complete()` runs its exchange in the caller's thread (the same
    SDK request, SSE stream and assembly) instead of handing it to a model-call thread, whose only
    purpose is to bound waits on a network by the call's deadline."""
    return client in _in_process


def reset_client() -> None:
    """Forget every cached client (for tests that change LLM_* settings)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()
