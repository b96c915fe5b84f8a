"""How a model call fails, each with a stable code, and how an SDK or transport failure maps to one.

`ModelError` is the base. Retryable failures (`ModelUnavailable` and its `ModelTimeout`) may
succeed later: a resume task parks the run and retries. The others will fail the same way until an
operator changes something (key, model name, base URL, request size), so they are never retried:

| code | HTTP from the provider | operator checks |
| --- | --- | --- |
| MODEL_UNAVAILABLE (retryable) | 5xx, 408, 409, connection errors, malformed stream | the provider's status |
| MODEL_RATE_LIMITED (retryable) | 429 rate limits, still after the retries | the account's rate limits |
| MODEL_TIMEOUT (retryable) | no complete answer within LLM_DEADLINE_SECONDS | the provider's latency, the deadline |
| MODEL_AUTH_FAILED | 401, 403 | LLM_API_KEY (and its access to LLM_MODEL) |
| MODEL_NOT_FOUND | 404 | LLM_MODEL and LLM_BASE_URL |
| MODEL_REQUEST_REJECTED | 400, 413, 422 and other 4xx | the request the platform sends (the provider's message says what) |
| MODEL_REQUEST_TOO_LARGE | 413, or a 429 whose body says the request is too large (not a rate) | the provider's token limits, AGENT_MEMORY_WINDOW |
| MODEL_QUOTA_EXCEEDED | a 429 `insufficient_quota`, a 402 (the account's balance, not a rate) | the provider account's billing |
| MODEL_CONTEXT_TOO_LONG | 400 context_length_exceeded, after one retry with a trimmed memory | the memory window, the model's context size |

Messages never hold the API key; the provider's own message is included after masking
(`core.redaction.text.mask_provider_text`). `model_error()` is the mapping (docs/providers.md).
"""
from __future__ import annotations

import json
import logging
import re
from urllib.parse import urlsplit

import httpx2
import openai
from django.conf import settings

from agentplatform.llm.normalize import error_message_and_code
from core.redaction.text import mask_provider_text
from core.text import storable_text

logger = logging.getLogger(__name__)


class ModelError(Exception):
    """A model call failed. `code` is stable, `message` is for an operator, `retryable` says
    whether trying again later may succeed. `provider_status` is the HTTP status, if any."""

    code = "MODEL_ERROR"
    retryable = False

    def __init__(self, message: str, *, provider_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.provider_status = provider_status


class ModelUnavailable(ModelError):
    """The model endpoint failed after the bounded retries (timeouts, connection errors, 5xx, 429)."""

    code = "MODEL_UNAVAILABLE"
    retryable = True


class ModelRateLimited(ModelUnavailable):
    """HTTP 429 about a rate (requests or tokens per minute), still after the bounded retries."""

    code = "MODEL_RATE_LIMITED"


class ModelTimeout(ModelUnavailable):
    """No complete answer within LLM_DEADLINE_SECONDS (the whole call: connect, retries, every chunk)."""

    code = "MODEL_TIMEOUT"


class ModelAuthFailed(ModelError):
    """HTTP 401/403: the key is wrong, revoked, or not allowed to use the model."""

    code = "MODEL_AUTH_FAILED"


class ModelNotFound(ModelError):
    """HTTP 404: no such model (or no chat-completions endpoint at the base URL)."""

    code = "MODEL_NOT_FOUND"


class ModelRequestRejected(ModelError):
    """HTTP 400/422 and other client errors: the provider refused the request itself."""

    code = "MODEL_REQUEST_REJECTED"


class ModelRequestTooLarge(ModelError):
    """HTTP 413, or a 429 that is not a rate: the request exceeds a size or quota limit."""

    code = "MODEL_REQUEST_TOO_LARGE"


class ModelQuotaExceeded(ModelError):
    """A 429 about the account's quota or balance (`insufficient_quota`), not a rate limit."""

    code = "MODEL_QUOTA_EXCEEDED"


class ModelContextTooLong(ModelRequestRejected):
    """The messages exceed the model's context window (context_length_exceeded)."""

    code = "MODEL_CONTEXT_TOO_LONG"


# -- mapping a failure to one of them -------------------------------------------------------------

_CONTEXT = re.compile(r"(?i)context[ _-]?(length|window)|maximum context|too many tokens|token limit|"
                      r"input (length|tokens?) .*(exceed|too long|range)|prompt is too long|range of input length")
# Wordings of a 429 that is about size, not rate (OpenAI, Groq: "Request too large for <model> ... on
# tokens per min"), and of an exhausted account (OpenAI's insufficient_quota; DeepSeek answers 402).
_TOO_LARGE = re.compile(r"(?i)\b(request|payload|entity|input|prompt)s? (is |are )?too (large|long)\b|too large for")
_QUOTA = re.compile(r"(?i)insufficient[_ ](quota|balance)|exceeded your current quota|quota (is )?exceeded")


def _endpoint(client: openai.OpenAI) -> str:
    """The base URL without credentials or query (safe to print)."""
    parts = urlsplit(str(client.base_url))
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


def model_error(exc: BaseException, *, client: openai.OpenAI, model: str) -> ModelError:
    """Map an SDK (or transport) failure to a ModelError with an operator-actionable message.

    exc: what the SDK or the transport raised (a ModelError is returned as it is). client: the
    client that sent the request (its endpoint is named, its key masked). model: the model asked
    for. Returns the ModelError subclass of the table above; raises nothing. Never includes the
    SDK's own exception text (it may echo the request, whose headers carry the key); the
    provider's error message is included after `mask_provider_text`.
    """
    if isinstance(exc, ModelError):
        return exc
    endpoint = _endpoint(client)
    if isinstance(exc, openai.APITimeoutError):
        return ModelUnavailable(f"the model endpoint {endpoint} did not answer within "
                                f"LLM_TIMEOUT_SECONDS={settings.LLM_TIMEOUT_SECONDS:g}")
    if isinstance(exc, (openai.APIConnectionError, httpx2.TransportError)):
        return ModelUnavailable(f"could not reach the model endpoint {endpoint} (connection failed or dropped)")
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelUnavailable("the model endpoint sent a response that does not match the chat-completions format")
    if isinstance(exc, json.JSONDecodeError):
        return ModelUnavailable("the model endpoint sent a stream chunk that is not JSON")
    if not isinstance(exc, openai.APIError):
        logger.warning("model call failed on %s", type(exc).__name__, exc_info=exc)
        return ModelUnavailable(f"the model endpoint sent a response this platform cannot read ({type(exc).__name__})")
    message, code = error_message_and_code(exc.body)
    said = mask_provider_text(storable_text(message), api_key=str(client.api_key or ""))
    said = f"; the provider said: {said}" if said else ""
    status = getattr(exc, "status_code", None)
    if status is None:  # an error event inside a stream
        return ModelUnavailable(f"the model endpoint {endpoint} reported an error in its stream{said}")
    if status in (401, 403):
        return ModelAuthFailed(
            f"the model endpoint {endpoint} refused the credentials (HTTP {status}): check LLM_API_KEY and that it "
            f"may use LLM_MODEL={model!r}{said}", provider_status=status)
    if status == 404:
        return ModelNotFound(
            f"the model endpoint {endpoint} has no model {model!r} (HTTP 404): check LLM_MODEL and LLM_BASE_URL{said}",
            provider_status=status)
    if status in (400, 413, 422) and (code == "context_length_exceeded" or _CONTEXT.search(message)):
        return ModelContextTooLong(
            f"the conversation does not fit the context window of {model!r} (HTTP {status}){said}",
            provider_status=status)
    if status == 413 or (status == 429 and _TOO_LARGE.search(message) and not _QUOTA.search(message)):
        return ModelRequestTooLarge(
            f"the model endpoint {endpoint} refused the request as too large (HTTP {status}), not a rate limit: "
            f"waiting does not help; check the model's token limits, AGENT_MEMORY_WINDOW and the tools offered{said}",
            provider_status=status)
    if status == 402 or (status == 429 and (code == "insufficient_quota" or _QUOTA.search(message))):
        return ModelQuotaExceeded(
            f"the model endpoint {endpoint} refused the request: the account's quota is used up (HTTP {status}), not a "
            f"rate limit; check the provider account's billing and quota for LLM_API_KEY{said}", provider_status=status)
    if status == 429:
        return ModelRateLimited(f"the model endpoint {endpoint} is rate limiting requests (HTTP 429){said}",
                                provider_status=status)
    if status in (408, 409) or status >= 500:
        return ModelUnavailable(f"the model endpoint {endpoint} answered HTTP {status}{said}", provider_status=status)
    return ModelRequestRejected(
        f"the model endpoint {endpoint} rejected the request (HTTP {status}): check LLM_MODEL={model!r} supports "
        f"tool calling and LLM_BASE_URL is an OpenAI-compatible chat-completions endpoint{said}",
        provider_status=status)
