"""The one way the agent runtime talks to a model: an `openai.OpenAI` client and `complete()`.

`get_client()` builds the SDK client from settings (`LLM_BASE_URL`, `LLM_API_KEY`,
`LLM_TIMEOUT_SECONDS`, `LLM_MAX_RETRIES`). With no `LLM_API_KEY` it points the same SDK at the
embedded offline planner through an in-process httpx2 transport (DESIGN section 6), so the code
path is identical with and without a network.

`complete()` sends one chat-completions request and returns a `ModelTurn`:

- Streaming responses are assembled here: tool-call deltas are joined by `index` before anyone
  parses the arguments; what the provider sent is then normalised into one canonical turn by
  `agentplatform.llm.normalize` (the only place that knows provider shapes; docs/providers.md).
- The whole call (connect, retries with their waits, every chunk of a stream) has one deadline,
  `LLM_DEADLINE_SECONDS`: the SDK's timeout applies per read, so a stream dripping a chunk every
  few seconds would otherwise never end. The HTTP exchange runs in a helper thread that hands each
  chunk over a queue; this thread (the caller's, which owns the database connection and the
  `on_text` callback) waits on the queue for at most what is left of the deadline, then abandons
  the call (the helper stops at its next chunk or read timeout and closes the response) and
  raises `ModelTimeout`.
- Retries are ours, not the SDK's (`max_retries=0` on the wire): 429 rate limits, 408/409, 5xx
  and connection errors are retried up to `client.max_retries` times with the provider's
  Retry-After (or exponential backoff with jitter), never past the deadline. 401/403/404/400 and
  a 429 that is about size or quota are never retried; each has its own code
  (`agentplatform.llm.errors`) and a message naming what an operator should check, with the
  provider's own message masked.
"""
from __future__ import annotations

import json
import logging
import queue
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai
from django.conf import settings

from agentplatform.llm import normalize
from agentplatform.llm.errors import (
    ModelAuthFailed,
    ModelContextTooLong,
    ModelError,
    ModelNotFound,
    ModelQuotaExceeded,
    ModelRateLimited,
    ModelRequestRejected,
    ModelRequestTooLarge,
    ModelTimeout,
    ModelUnavailable,
)
from agentplatform.llm.types import ModelTurn
from agentplatform.redaction import mask_text
from agentplatform.text import loads_json, storable_text
from tools.masking import LONG_DIGITS

logger = logging.getLogger(__name__)

OFFLINE_BASE_URL = "http://offline-model.invalid/v1"
# The SDK refuses to build a client without a key; the offline transport never looks at it.
OFFLINE_API_KEY = "offline"
# A Retry-After longer than this is not waited for (the SDK's own limit, MAX_RETRY_AFTER_DELAY).
MAX_RETRY_AFTER_SECONDS = 60.0
PROVIDER_MESSAGE_CHARS = 300

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


# -- provider failures ----------------------------------------------------------------------------

_KEYLIKE = re.compile(r"(?i)\b((?:sk|pk|rk|ak|key|tok)[-_][A-Za-z0-9_\-]{4})[A-Za-z0-9_\-.*]{4,}")
_BEARER = re.compile(r"(?i)\bBearer\s+\S+")
_LONG_OPAQUE = re.compile(r"\b[A-Za-z0-9_\-]{32,}\b")
_CONTEXT = re.compile(r"(?i)context[ _-]?(length|window)|maximum context|too many tokens|token limit|"
                      r"input (length|tokens?) .*(exceed|too long|range)|prompt is too long|range of input length")
# Wordings of a 429 that is about size, not rate (OpenAI, Groq: "Request too large for <model> ... on
# tokens per min"), and of an exhausted account (OpenAI's insufficient_quota; DeepSeek answers 402).
_TOO_LARGE = re.compile(r"(?i)\b(request|payload|entity|input|prompt)s? (is |are )?too (large|long)\b|too large for")
_QUOTA = re.compile(r"(?i)insufficient[_ ](quota|balance)|exceeded your current quota|quota (is )?exceeded")


def _mask_provider_text(text: str, api_key: str) -> str:
    """The provider's own message, safe to show an operator: the configured key, key-like and long
    opaque tokens and card-like digit runs masked; unstorable characters cleaned; truncated."""
    text = storable_text(text)
    if api_key and len(api_key) >= 8:
        text = text.replace(api_key, api_key[:3] + "****")
    text = _BEARER.sub("Bearer ****", text)
    text = _KEYLIKE.sub(lambda m: m.group(1) + "****", text)
    text = _LONG_OPAQUE.sub(lambda m: m.group(0)[:4] + "****", text)
    text = LONG_DIGITS.sub(lambda m: m.group(0)[:4] + "****", text)
    text = mask_text(" ".join(text.split()))  # a provider may echo the prompt: phones, card data...
    return text[:PROVIDER_MESSAGE_CHARS] + ("…" if len(text) > PROVIDER_MESSAGE_CHARS else "")


def _provider_error(body: Any) -> tuple[str, str]:
    """(message, code-or-type) from an error body (`{"error": {...}}` already unwrapped by the SDK,
    `{"message": ...}`, `{"detail": ...}` (vLLM/FastAPI) or plain text)."""
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        message = inner.get("message") or inner.get("detail") or inner.get("error") or ""
        code = inner.get("code") or inner.get("type") or ""
        if not isinstance(message, str):
            message = json.dumps(message, ensure_ascii=False)[:PROVIDER_MESSAGE_CHARS * 2]
        return message, str(code)
    if isinstance(body, str):
        return body, ""
    return "", ""


def _endpoint(client: openai.OpenAI) -> str:
    """The base URL without credentials or query (safe to print)."""
    parts = urlsplit(str(client.base_url))
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


def model_error(exc: BaseException, *, client: openai.OpenAI, model: str) -> ModelError:
    """Map an SDK (or transport) failure to a ModelError with an operator-actionable message.

    Never includes the SDK's own exception text (it may echo the request, whose headers carry the
    key); the provider's error message is included after `_mask_provider_text`.
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
    message, code = _provider_error(exc.body)
    said = _mask_provider_text(message, str(client.api_key or ""))
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


def _retry_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before attempt `attempt + 1`, or None when the failure must not be retried
    (the server said `x-should-retry: false`, or asked to wait longer than MAX_RETRY_AFTER_SECONDS)."""
    response = getattr(exc, "response", None)
    headers = response.headers if response is not None else {}
    if headers.get("x-should-retry") == "false":
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                seconds = float(value) * scale
            except ValueError:
                continue
            return seconds if 0 <= seconds <= MAX_RETRY_AFTER_SECONDS else None
    return min(0.5 * 2 ** attempt, 8.0) * (1 - 0.25 * random.random())


# -- one call under a deadline ----------------------------------------------------------------------

_END = object()
_ABANDONED = object()  # what `_create` returns when the caller gave up during a retry wait


class _Exchange(threading.Thread):
    """The HTTP side of one model call, in its own thread: create (with our retries), then put each
    stream chunk (or the one completion) on `items`, then `_END`; an exception is put instead.
    `abandon()` makes it stop at its next chunk or retry wait and close the response."""

    def __init__(self, client: openai.OpenAI, request: dict[str, Any], *, stream: bool, deadline: float,
                 model: str) -> None:
        super().__init__(name="model-call", daemon=True)
        self.client, self.request, self.stream, self.deadline, self.model = client, request, stream, deadline, model
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.abandoned = threading.Event()

    def abandon(self) -> None:
        self.abandoned.set()

    def run(self) -> None:
        try:
            response = self._create()
            if response is _ABANDONED:
                return
            if not self.stream:
                self.items.put(response)  # a JSON `null` body too: the caller answers MODEL_UNAVAILABLE
            else:
                with response:
                    for chunk in response:
                        if self.abandoned.is_set():
                            return
                        self.items.put(chunk)
            self.items.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.items.put(exc)

    def _create(self) -> Any:
        sdk = self.client.with_options(max_retries=0)
        attempts = max(int(self.client.max_retries), 0) + 1
        for attempt in range(attempts):
            remaining = self.deadline - time.monotonic()
            timeout = min(float(settings.LLM_TIMEOUT_SECONDS), max(remaining, 0.05))
            try:
                # The request is already chat-completions wire JSON (normalize.replay_messages and
                # the tools' JSON schemas), so it is posted as it is, through the SDK's documented
                # `client.post` for raw requests: `create` first walks every message and tool
                # schema with its TypedDict transform, which changes nothing in such a body and
                # cost 1.8 ms per call (issue 11). The answer comes back as the decoded JSON
                # (`cast_to=object`, `Stream[object]`; the SDK still decodes the SSE, raises the
                # stream's error events and maps HTTP errors): building a ChatCompletionChunk
                # model per chunk cost about 0.1 ms each, half of an offline call, and grows with
                # every token a real model streams; the SDK's construction never validated them.
                return sdk.post("/chat/completions", body={**self.request, "stream": self.stream},
                                cast_to=object, options={"timeout": timeout}, stream=self.stream,
                                stream_cls=openai.Stream[object])
            except (openai.OpenAIError, httpx2.TransportError) as exc:
                error = model_error(exc, client=self.client, model=self.model)
                delay = _retry_delay(exc, attempt) if error.retryable else None
                if delay is None or attempt + 1 >= attempts or time.monotonic() + delay >= self.deadline:
                    raise error from None
                logger.info("model call attempt %d failed (%s); retrying in %.2fs", attempt + 1, error.code, delay)
                if self.abandoned.wait(delay):
                    return _ABANDONED
        return _ABANDONED


def _items(exchange: _Exchange, deadline: float, seconds: float) -> Iterator[Any]:
    """What the exchange produces, until its end; raises ModelTimeout when the deadline passes
    first (the exchange is abandoned) and re-raises what the exchange raised."""
    while True:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise queue.Empty
            item = exchange.items.get(timeout=remaining)
        except queue.Empty:
            exchange.abandon()
            raise ModelTimeout(f"the model did not finish its answer within LLM_DEADLINE_SECONDS={seconds:g}; "
                               f"the call was abandoned") from None
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _member(value: Any, name: str) -> Any:
    """`value[name]` when `value` is a JSON object, else None (a provider's chunk may omit or null
    any part of the chat-completions shape)."""
    return value.get(name) if isinstance(value, dict) else None


def _members(value: Any, name: str) -> list:
    """`value[name]` when it is a JSON array, else []."""
    found = _member(value, name)
    return found if isinstance(found, list) else []


def _call_index(value: Any) -> int | None:
    """A tool-call fragment's (or a choice's) `index` as an int (a digit string or an integral
    number, as some servers send it), or None when it is missing or unusable (a fragment then
    continues the last call, see `_assemble_stream`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())  # ASCII only: "²".isdigit() is True, but int("²") fails
    return None


# finish_reason values after which a turn may execute tools (ModelTurn.complete); once a stream
# has said anything else (length, content_filter, an unknown reason) a later chunk cannot undo it.
_COMPLETE_REASONS = ("stop", "tool_calls")


def _refusal_text(value: Any) -> str:
    """The text of a `refusal` field (OpenAI's structured refusal), "" when there is none."""
    return value if isinstance(value, str) else ""


def _assemble_stream(chunks: Iterator[Any], on_text: Callable[[str], None] | None,
                     taken: set[str]) -> ModelTurn:
    """Join the deltas of a chat.completion.chunk stream (decoded JSON objects) into one canonical
    ModelTurn.

    Text deltas are concatenated (each passed, cleaned, to on_text as it comes); `reasoning_content`
    deltas are kept apart; `refusal` deltas are the answer when there is no text. Tool-call deltas
    are joined by `index` (`_add_fragment`): id and name are taken from the first delta that
    carries them, argument fragments are kept in arrival order, and a fragment naming another id or
    function at the same index is a new call. The finish_reason is the last one seen, except that a
    truncating one (length, content_filter, anything but stop/tool_calls) is never overridden by a
    later chunk. A part of the wrong JSON type is ignored. Raises ModelUnavailable when the stream
    ends without any finish_reason (a dropped or truncated stream), or carries only a legacy
    `function_call`.
    """
    text: list[str] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    calls: list[normalize.RawCall] = []  # in the order they started
    position: dict[int, int] = {}  # the provider's index -> the call it currently continues
    finish_reason: str | None = None
    legacy_call = False
    for chunk in chunks:
        # Usage-only chunks and Azure's prompt-filter chunk have no choices.
        for choice in _members(chunk, "choices"):
            if not isinstance(choice, dict):
                continue
            if choice.get("index") is not None and _call_index(choice["index"]) != 0:
                continue  # another choice than the first (n > 1); an index of "0" is the first too
            delta = choice.get("delta")
            if isinstance(delta, dict):
                thought = delta.get("reasoning_content")
                if isinstance(thought, str) and thought:
                    reasoning.append(thought)
                if delta.get("content"):
                    piece, thinking = normalize.content_parts(delta["content"])
                    reasoning.append(thinking)
                    text.append(piece)
                    if on_text is not None and piece:
                        on_text(storable_text(piece))
                refusal.append(_refusal_text(delta.get("refusal")))
                legacy_call = legacy_call or isinstance(delta.get("function_call"), dict)
                for fragment in _members(delta, "tool_calls"):
                    if not isinstance(fragment, dict):
                        continue
                    _add_fragment(fragment, calls, position)
            reason = choice.get("finish_reason")
            if reason and (finish_reason is None or normalize.finish_reason_of(finish_reason) in _COMPLETE_REASONS):
                finish_reason = reason  # a truncating reason already seen (in any spelling) is never overridden
    if finish_reason is None:
        raise ModelUnavailable("the model stream ended before the turn finished")
    content = "".join(text) or "".join(refusal)  # a structured refusal is the model's answer
    if legacy_call and not calls:
        raise ModelUnavailable(_LEGACY_CALL)
    return normalize.normalize_turn(content=content, reasoning="".join(reasoning),
                                    raw_calls=sorted(calls, key=lambda call: call.order),
                                    finish_reason=finish_reason, taken=taken)


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


_LEGACY_CALL = ("the model answered with a legacy `function_call`, which this platform does not run "
                "(it sends `tools` and reads `tool_calls`)")


def _whole(call: normalize.RawCall) -> bool:
    """True when `call`'s argument fragments so far already form one JSON value."""
    text = "".join(part if isinstance(part, str) else json.dumps(part) for part in call.arguments)
    if not text.strip():
        return False
    try:
        loads_json(text)
    except ValueError:
        return False
    return True


def _add_fragment(fragment: dict, calls: list, position: dict[int, int]) -> None:
    """Add one streamed tool-call fragment to `calls` (RawCall, in the order they started).

    Fragments are joined by the provider's `index`. At an index that holds a call, a fragment
    naming another function is a new call, never a continuation (some servers send every call at
    index 0; merging would build a call the model never made from one call's name and another's
    arguments); so is one naming the same function under another id once the call's arguments are
    whole. Any other fragment continues the call: some providers repeat the id and name on every
    delta, and some change the id on later chunks of the same call. A fragment without an index
    continues the last call, unless it starts a new named one with another id.
    """
    function = fragment.get("function")
    function = function if isinstance(function, dict) else None
    name = function.get("name") if function is not None else None
    call_id = fragment.get("id") or None
    index = _call_index(fragment.get("index"))
    current = calls[position[index]] if index is not None and index in position else \
        (calls[-1] if index is None and calls else None)
    if current is None:
        starts_new = True
    elif index is None:  # whole calls in one chunk each (Ollama, llama.cpp): a named one with another id
        starts_new = bool(name and current.name and call_id != current.id)
    else:
        # At an occupied index only a fragment naming a function can start a call: another name, or
        # another id once the call's arguments are whole (some servers change the id on later
        # chunks of the same call: those continue it).
        starts_new = bool(name and current.name and (
            name != current.name or (call_id and current.id and call_id != current.id and _whole(current))))
    if starts_new:
        current = normalize.RawCall()
        # Ordered by the provider's index (then by arrival); one without an index after the rest.
        current.order = (index if index is not None else max((c.order[0] for c in calls), default=-1) + 1,
                         len(calls))
        calls.append(current)
        if index is not None:
            position[index] = len(calls) - 1
    if call_id and not current.id:
        current.id = call_id
    if function is not None:
        if name and not current.name:
            current.name = name
        arguments = function.get("arguments")
        if arguments is not None and arguments != "":
            current.arguments.append(arguments)


def _from_completion(completion: Any, on_text: Callable[[str], None] | None, taken: set[str]) -> ModelTurn:
    """The ModelTurn of a whole (non-streamed) chat completion, decoded JSON. A body sent with a
    non-JSON content type arrives as text and is decoded here. Raises ModelUnavailable when it is
    not JSON or has no choice object."""
    if isinstance(completion, (str, bytes)):
        try:
            completion = loads_json(completion)
        except (ValueError, UnicodeError):
            raise ModelUnavailable("the model endpoint sent an answer that is not JSON") from None
    choices = [choice for choice in _members(completion, "choices") if isinstance(choice, dict)]
    if not choices:
        raise ModelUnavailable("the model endpoint returned no choices")
    choice = choices[0]
    message = _member(choice, "message") or {}
    raw_calls = []
    for call in _members(message, "tool_calls"):
        function = _member(call, "function")  # custom (non-function) tools are not used here
        if isinstance(function, dict):
            raw_calls.append(normalize.RawCall(id=call.get("id"), name=function.get("name"),
                                               arguments=[function.get("arguments")]))
    if not raw_calls and isinstance(_member(message, "function_call"), dict):
        raise ModelUnavailable(_LEGACY_CALL)
    reasoning = _member(message, "reasoning_content")
    content = _member(message, "content")
    if not content:
        content = _refusal_text(_member(message, "refusal")) or content  # a structured refusal is the answer
    turn = normalize.normalize_turn(content=content, raw_calls=raw_calls,
                                    reasoning=reasoning if isinstance(reasoning, str) else "",
                                    finish_reason=choice.get("finish_reason") or "stop", taken=taken)
    if turn.content and on_text is not None:
        on_text(turn.content)
    return turn


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
    get_client() (its `max_retries` is the number of retries). model: defaults to
    settings.LLM_MODEL. deadline_seconds: the whole call's bound, default LLM_DEADLINE_SECONDS.

    Returns ModelTurn(content, tool_calls in index order with unique ids and argument strings,
    finish_reason, reasoning); arguments are never parsed here. A turn cut by `length` or a filter
    is returned with `complete == False` for the caller to refuse. Raises ModelTimeout past the
    deadline, ModelUnavailable when the endpoint still fails after the retries, and the
    non-retryable ModelError subclasses (see agentplatform.llm.errors) at once.
    """
    client = client if client is not None else get_client()
    stream = settings.LLM_STREAM if stream is None else stream
    model = model or settings.LLM_MODEL
    seconds = float(settings.LLM_DEADLINE_SECONDS if deadline_seconds is None else deadline_seconds)
    deadline = time.monotonic() + seconds
    request: dict[str, Any] = {"model": model, "messages": normalize.replay_messages(messages)}
    if tools:
        request["tools"] = tools
    taken = normalize.history_call_ids(messages)
    exchange = _Exchange(client, request, stream=stream, deadline=deadline, model=model)
    exchange.start()
    items = _items(exchange, deadline, seconds)
    if on_text is not None:
        on_text = _surfacing(on_text)
    try:
        if not stream:
            completion = next(items, _END)
            if completion is _END or completion is None:
                raise ModelUnavailable("the model endpoint sent no answer")
            return _from_completion(completion, on_text, taken)
        return _assemble_stream(items, on_text, taken)
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
