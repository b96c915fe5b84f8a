"""The one way the agent runtime talks to a model: an `openai.OpenAI` client and `complete()`.

`get_client()` builds the SDK client from settings (`LLM_BASE_URL`, `LLM_API_KEY`,
`LLM_TIMEOUT_SECONDS`, `LLM_MAX_RETRIES`). With no `LLM_API_KEY` it points the same SDK at the
embedded offline planner through an in-process httpx2 transport (DESIGN section 6), so the code
path is identical with and without a network.

`complete()` sends one chat-completions request and returns a `ModelTurn`. Streaming responses
are assembled here: tool-call deltas are joined by `index` *before* anyone parses the arguments
(arguments stay raw strings; the tool pipeline parses and validates them). Retries of 429, 5xx and
connection errors are the SDK's own bounded `max_retries` with backoff; whatever is still failing
afterwards becomes `ModelUnavailable`.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from django.conf import settings

from agentplatform.llm.types import ModelToolCall, ModelTurn, ModelUnavailable

OFFLINE_BASE_URL = "http://offline-model.invalid/v1"
# The SDK refuses to build a client without a key; the offline transport never looks at it.
OFFLINE_API_KEY = "offline"

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], openai.OpenAI] = {}


def _settings_key() -> tuple[Any, ...]:
    return (settings.LLM_BASE_URL, settings.LLM_API_KEY, float(settings.LLM_TIMEOUT_SECONDS),
            int(settings.LLM_MAX_RETRIES))


def _build_client(base_url: str, api_key: str, timeout: float, max_retries: int) -> openai.OpenAI:
    if not api_key:
        # Imported lazily: the offline planner is only needed when no real endpoint is configured.
        from agentplatform.llm.offline import OfflineModelTransport

        return openai.OpenAI(api_key=OFFLINE_API_KEY, base_url=OFFLINE_BASE_URL, timeout=timeout,
                             max_retries=max_retries,
                             http_client=httpx2.Client(transport=OfflineModelTransport()))
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


def reset_client() -> None:
    """Forget every cached client (for tests that change LLM_* settings)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def _unavailable(exc: Exception) -> ModelUnavailable:
    """A short, key-free description of an SDK failure (the SDK's own message may echo request data)."""
    if isinstance(exc, openai.APITimeoutError):
        message = "the model endpoint timed out"
    elif isinstance(exc, openai.APIConnectionError):
        message = "could not reach the model endpoint (connection failed or dropped)"
    elif isinstance(exc, openai.RateLimitError):
        message = "the model endpoint is rate limiting requests (HTTP 429)"
    elif isinstance(exc, openai.APIStatusError):
        message = f"the model endpoint answered HTTP {exc.status_code}"
    elif isinstance(exc, openai.APIResponseValidationError):
        message = "the model endpoint sent a response that does not match the chat-completions format"
    elif isinstance(exc, json.JSONDecodeError):
        message = "the model endpoint sent a stream chunk that is not JSON"
    else:
        message = "the model endpoint reported an error"
    return ModelUnavailable(message)


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _assemble_stream(chunks: Iterable[Any], on_text: Callable[[str], None] | None) -> ModelTurn:
    """Join the deltas of a chat.completion.chunk stream into one ModelTurn.

    Text deltas are concatenated (and passed to on_text as they come). Tool-call deltas are joined
    by `index`: id and name are taken from the first delta that carries them, argument fragments are
    concatenated in arrival order. The finish_reason is the last one seen. Raises ModelUnavailable
    when the stream ends without any finish_reason (a dropped or truncated stream).
    """
    text: list[str] = []
    calls: dict[int, _PartialCall] = {}
    finish_reason: str | None = None
    for chunk in chunks:
        # Usage-only chunks and Azure's prompt-filter chunk have no choices.
        for choice in chunk.choices or ():
            if choice.index not in (0, None):
                continue
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    text.append(delta.content)
                    if on_text is not None:
                        on_text(delta.content)
                for position, fragment in enumerate(delta.tool_calls or ()):
                    index = fragment.index if fragment.index is not None else position
                    partial = calls.setdefault(index, _PartialCall())
                    # Some providers repeat id/name on every delta; the first one wins.
                    if fragment.id and not partial.id:
                        partial.id = fragment.id
                    function = fragment.function
                    if function is not None:
                        if function.name and not partial.name:
                            partial.name = function.name
                        if function.arguments:
                            partial.arguments.append(function.arguments)
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    if finish_reason is None:
        raise ModelUnavailable("the model stream ended before the turn finished")
    tool_calls = [ModelToolCall(id=c.id, name=c.name, arguments="".join(c.arguments))
                  for _, c in sorted(calls.items())]
    return ModelTurn(content="".join(text), tool_calls=tool_calls, finish_reason=finish_reason)


def _from_completion(completion: Any, on_text: Callable[[str], None] | None) -> ModelTurn:
    if not completion.choices:
        raise ModelUnavailable("the model endpoint returned no choices")
    choice = completion.choices[0]
    message = choice.message
    content = message.content or ""
    if content and on_text is not None:
        on_text(content)
    tool_calls = []
    for call in message.tool_calls or ():
        function = getattr(call, "function", None)  # custom (non-function) tools are not used here
        if function is not None:
            tool_calls.append(ModelToolCall(id=call.id, name=function.name, arguments=function.arguments or ""))
    return ModelTurn(content=content, tool_calls=tool_calls, finish_reason=choice.finish_reason or "stop")


def complete(
    *,
    messages: list[dict],
    tools: list[dict],
    stream: bool | None = None,
    on_text: Callable[[str], None] | None = None,
    client: openai.OpenAI | None = None,
    model: str | None = None,
) -> ModelTurn:
    """Run one model turn and return it as a ModelTurn.

    messages: chat-completions messages (`{"role", "content", ...}`). tools: chat-completions tool
    definitions (`{"type": "function", "function": {name, description, parameters}}`); sent only
    when non-empty, and `tool_choice` is never sent (the provider default "auto" applies).
    stream: defaults to settings.LLM_STREAM. on_text(delta) is called for every text delta when
    streaming, and once with the whole content when not. client: defaults to get_client().
    model: defaults to settings.LLM_MODEL.

    Returns ModelTurn(content, tool_calls in index order with raw argument strings, finish_reason);
    arguments are never parsed here. A turn cut by `length` or a filter is returned with
    `complete == False` for the caller to refuse. Raises ModelUnavailable when the endpoint still
    fails after the SDK's retries (HTTP errors, timeouts, dropped connections, malformed stream).
    """
    client = client if client is not None else get_client()
    stream = settings.LLM_STREAM if stream is None else stream
    request: dict[str, Any] = {"model": model or settings.LLM_MODEL, "messages": messages}
    if tools:
        request["tools"] = tools
    try:
        if not stream:
            return _from_completion(client.chat.completions.create(**request), on_text)
        response = client.chat.completions.create(**request, stream=True)
        with response:
            return _assemble_stream(response, on_text)
    except (openai.OpenAIError, json.JSONDecodeError) as exc:
        # `from None`: the SDK's exception holds the request, whose headers carry the API key.
        raise _unavailable(exc) from None
