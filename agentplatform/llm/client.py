"""The one way the agent runtime talks to a model: `complete()`, one chat-completions turn.

`complete()` sends one request and returns a canonical `ModelTurn`. It is put together from one
module per topic:

- `agentplatform.llm.factory`: the SDK client (`get_client()`; the offline model without a key);
- `agentplatform.llm.exchange`: the HTTP exchange in a helper thread under one deadline
  (`LLM_DEADLINE_SECONDS`), with our retries;
- `agentplatform.llm.assembly`: stream chunks (joined by tool-call `index`) or a whole completion
  become one turn, normalised by `agentplatform.llm.normalize` (the only place that knows provider
  shapes; docs/providers.md);
- `agentplatform.llm.errors`: each failure as a ModelError with its own code and a message naming
  what an operator should check, the provider's own message masked.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx2
import openai
from django.conf import settings

from agentplatform.llm import call_shapes, factory, normalize, tracing
from agentplatform.llm.assembly import assemble_stream, turn_from_completion
from agentplatform.llm.errors import ModelUnavailable, model_error
from agentplatform.llm.exchange import END, Exchange, exchange_items
from agentplatform.llm.types import ModelTurn

logger = logging.getLogger(__name__)


class _CallerError(Exception):
    """An exception of the caller's `on_text`, carried through `complete()`'s handling of the
    provider's failures and re-raised as it was."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


def _surfacing(on_text: Callable[[str], None]) -> Callable[[str], None]:
    def call(text: str) -> None:
        try:
            on_text(text)
        except Exception as error:  # noqa: BLE001 - re-raised unchanged by complete()
            raise _CallerError(error) from error
    return call


@tracing.traced_chat  # the `chat {model}` span (docs/observability.md); a plain call when tracing is off
def complete(
    *,
    messages: list[dict],
    tools: list[dict],
    stream: bool | None = None,
    on_text: Callable[[str], None] | None = None,
    client: openai.OpenAI | None = None,
    model: str | None = None,
    deadline_seconds: float | None = None,
) -> ModelTurn:
    """Run one model turn and return it as a canonical ModelTurn.

    messages: chat-completions messages (`{"role", "content", ...}`), sent through
    `normalize.replay_messages`. tools: chat-completions tool definitions; sent only when
    non-empty, and `tool_choice` is never sent (the provider default "auto" applies).
    stream: defaults to settings.LLM_STREAM. on_text(delta) is called (in the caller's thread) for
    every text delta when streaming, and once with the whole content when not. client: defaults to
    factory.get_client() (its `max_retries` is the number of retries). model: defaults to
    settings.LLM_MODEL. deadline_seconds: the whole call's bound, default LLM_DEADLINE_SECONDS.

    Returns ModelTurn(content, tool_calls in index order with unique ids and argument strings,
    finish_reason, reasoning); arguments are never parsed here. A turn cut by `length` or a filter
    is returned with `complete == False` for the caller to refuse. Raises ModelTimeout past the
    deadline, ModelUnavailable when the endpoint still fails after the retries, and the
    non-retryable ModelError subclasses (see agentplatform.llm.errors) at once.
    """
    client = client if client is not None else factory.get_client()
    stream = settings.LLM_STREAM if stream is None else stream
    model = model or settings.LLM_MODEL
    seconds = float(settings.LLM_DEADLINE_SECONDS if deadline_seconds is None else deadline_seconds)
    deadline = time.monotonic() + seconds
    request: dict[str, Any] = {"model": model, "messages": normalize.replay_messages(messages)}
    if tools:
        request["tools"] = tools
    taken = call_shapes.history_call_ids(messages)
    exchange = Exchange(client, request, stream=stream, deadline=deadline, model=model,
                        inline=factory.in_process(client))
    exchange.start()
    items = exchange_items(exchange, deadline, seconds)
    if on_text is not None:
        on_text = _surfacing(on_text)
    try:
        if not stream:
            completion = next(items, END)
            if completion is END or completion is None:
                raise ModelUnavailable("the model endpoint sent no answer")
            return turn_from_completion(completion, on_text, taken)
        return assemble_stream(items, on_text, taken)
    except _CallerError as wrapped:
        raise wrapped.error  # the caller's own on_text failed: never blamed on the provider
    except (openai.OpenAIError, httpx2.TransportError, json.JSONDecodeError) as exc:
        # `from None`: the SDK's exception holds the request, whose headers carry the API key.
        raise model_error(exc, client=client, model=model) from None
    except (UnicodeError, RecursionError, ValueError) as exc:
        # Bytes that are not UTF-8, JSON nested deeper than the parser goes, a value no JSON
        # reader would produce: the answer cannot be read, which is the endpoint's failure (never
        # a 500 of ours). Logged by type only: the text may hold what the model was sent.
        logger.warning("model answer could not be read: %s", type(exc).__name__)
        raise ModelUnavailable(f"the model endpoint sent an answer that cannot be read ({type(exc).__name__})") \
            from None
    finally:
        exchange.abandon()  # a no-op when it finished; stops it when the caller failed first
