"""How a model call fails, each with a stable code (issue 10 items 7-10).

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

Messages never hold the API key; the provider's own message is included after masking.
"""
from __future__ import annotations


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
