"""The `chat {model}` span of one model call (OpenTelemetry GenAI semantic conventions,
docs/observability.md), at no cost when tracing is off (core.tracing).

`traced_chat` wraps `llm.complete`; the exchange reports what the provider said about the call
(`observe`: the response's model, id and token usage, when the provider sends them) and carries
the span's context into its helper thread (`core.tracing.capture`), so the instrumented HTTP
request of the call is a child of the chat span. No message text, prompt or key is ever an
attribute; the masked-content opt-in adds nothing here (messages are not masked text).
"""
from __future__ import annotations

import functools
from contextvars import ContextVar
from typing import Any, Callable
from urllib.parse import urlsplit

from django.conf import settings
from opentelemetry.trace import SpanKind

from core import tracing

# The chat span of the model call running in this context (None: none, or tracing is off).
_CURRENT: ContextVar[Any] = ContextVar("chat_span", default=None)

# gen_ai.provider.name of well-known endpoints (the conventions' values); another OpenAI-compatible
# endpoint is named by its host.
_PROVIDERS = {"api.openai.com": "openai", "api.deepseek.com": "deepseek", "api.mistral.ai": "mistral_ai",
              "api.groq.com": "groq", "api.x.ai": "x_ai", "api.perplexity.ai": "perplexity",
              "dashscope.aliyuncs.com": "alibaba.dashscope", "open.bigmodel.cn": "zhipu"}


def provider() -> tuple[str, str | None, int | None]:
    """(gen_ai.provider.name, server.address, server.port) of the configured endpoint; the offline
    model (no LLM_API_KEY) is "agentplatform.offline" with no address."""
    if not settings.LLM_API_KEY:
        return "agentplatform.offline", None, None
    parts = urlsplit(settings.LLM_BASE_URL)
    host = parts.hostname or ""
    return _PROVIDERS.get(host, host or "openai"), host or None, parts.port


def traced_chat(complete: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate `llm.complete` with the chat span (a plain call when tracing is off)."""

    @functools.wraps(complete)
    def chat(**kwargs: Any) -> Any:
        if not tracing.on():
            return complete(**kwargs)
        model = kwargs.get("model") or settings.LLM_MODEL
        name, address, port = provider()
        with tracing.span(f"chat {model}", {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
            "gen_ai.provider.name": name, "gen_ai.system": name,
            "server.address": address, "server.port": port,
            "agentplatform.request.tools": len(kwargs.get("tools") or []),
        }, kind=SpanKind.CLIENT) as span:
            token = _CURRENT.set(span)
            try:
                turn = complete(**kwargs)
            except Exception as error:
                tracing.set_attributes(span, {"error.type": getattr(error, "code", None) or type(error).__name__})
                raise
            finally:
                _CURRENT.reset(token)
            tracing.set_attributes(span, {"gen_ai.response.finish_reasons": [turn.finish_reason],
                                          "agentplatform.response.tool_calls": len(turn.tool_calls)})
            return turn

    return chat


def observe(item: Any) -> None:
    """Read the response's model, id and usage from a completion or stream chunk (decoded JSON)."""
    current = _CURRENT.get()
    if current is None or not isinstance(item, dict):
        return
    usage = item.get("usage")
    attributes: dict[str, Any] = {}
    if isinstance(item.get("model"), str):
        attributes["gen_ai.response.model"] = item["model"][:200]
    if isinstance(item.get("id"), str):
        attributes["gen_ai.response.id"] = item["id"][:200]
    if isinstance(usage, dict):
        for key, name in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                          ("completion_tokens", "gen_ai.usage.output_tokens")):
            if isinstance(usage.get(key), int):
                attributes[name] = usage[key]
    tracing.set_attributes(current, attributes)
