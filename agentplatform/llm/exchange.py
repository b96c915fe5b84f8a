"""One model call's HTTP exchange under one deadline, in a helper thread.

The whole call (connect, retries with their waits, every chunk of a stream) has one deadline,
`LLM_DEADLINE_SECONDS`: the SDK's timeout applies per read, so a stream dripping a chunk every few
seconds would otherwise never end. `Exchange` runs the HTTP side in its own thread and hands each
chunk over a queue; `exchange_items()`, in the caller's thread (which owns the database connection
and the `on_text` callback), waits on the queue for at most what is left of the deadline, then
abandons the call (the helper stops at its next chunk or read timeout and closes the response) and
raises `ModelTimeout`.

Retries are ours, not the SDK's (`max_retries=0` on the wire): 429 rate limits, 408/409, 5xx and
connection errors are retried up to `client.max_retries` times with the provider's Retry-After (or
exponential backoff with jitter), never past the deadline. The failures `model_error` maps to a
non-retryable ModelError are raised at once.
"""
from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
from django.conf import settings

from core import tracing as core_tracing
from agentplatform.llm import tracing
from agentplatform.llm.errors import ModelTimeout, model_error

logger = logging.getLogger(__name__)

# A Retry-After longer than this is not waited for (the SDK's own limit, MAX_RETRY_AFTER_DELAY).
MAX_RETRY_AFTER_SECONDS = 60.0


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


# -- the threads that run exchanges ------------------------------------------------------------------

# Idle model-call threads kept for the next call, and how long one waits for it before it ends.
MAX_IDLE_WORKERS = 8
WORKER_IDLE_SECONDS = 60.0

_idle: list[_Worker] = []
_idle_lock = threading.Lock()


class _Worker(threading.Thread):
    """A daemon thread that runs one exchange after another. After each it waits up to
    WORKER_IDLE_SECONDS for the next, kept in `_idle` (at most MAX_IDLE_WORKERS of them); then it
    ends. A worker runs one exchange at a time and is never waited for: a call that finds no idle
    worker starts a new one, so an abandoned exchange that still holds its worker (until its next
    chunk or read timeout) never delays another call."""

    def __init__(self) -> None:
        super().__init__(name="model-call", daemon=True)
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.resting = False  # back in `_idle` (or retiring) before its job returned
        self.retiring = False

    def rest(self) -> None:
        """Offer this worker for the next call now (called in this thread by its job once all that
        is left of it is handing over its last item): a caller that starts its next call at once
        finds it idle instead of starting a thread. A job given meanwhile waits in `jobs` for the
        few statements the current one still runs. No-op when already done for this job."""
        if self.resting:
            return
        with _idle_lock:
            if len(_idle) >= MAX_IDLE_WORKERS:
                self.retiring = True
            else:
                _idle.append(self)
        self.resting = True

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=WORKER_IDLE_SECONDS)
            except queue.Empty:
                with _idle_lock:
                    if self in _idle:  # nobody took it meanwhile: it ends
                        _idle.remove(self)
                        return
                continue  # taken just now: its job is on the way
            self.resting = self.retiring = False
            try:
                job()
            except BaseException:  # noqa: BLE001 - an exchange hands its own errors to its caller
                logger.exception("model-call thread: an exchange failed outside its own handling")
            self.rest()  # an abandoned exchange returns without handing anything over
            if self.retiring:
                return


def _forget_idle_after_fork() -> None:
    """A forked child (gunicorn, Celery prefork) has none of its parent's threads."""
    global _idle_lock
    _idle.clear()
    _idle_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_idle_after_fork)


def _submit(job: Any) -> None:
    """Run `job()` in an idle worker, or in a new one when none is idle (never waits for one)."""
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        worker.jobs.put(job)
        worker.start()
    else:
        worker.jobs.put(job)


# -- one call under a deadline ----------------------------------------------------------------------

END = object()  # what the exchange puts on its queue after the last item
_ABANDONED = object()  # what `_create` returns when the caller gave up during a retry wait


class Exchange:
    """The HTTP side of one model call, in a model-call thread (`start()`; a thread is reused from
    one call to the next rather than started per call, which cost 0.1 ms on an idle machine and
    milliseconds on a busy one: docs/performance.md): create (with our retries), then put each
    stream chunk (or the one completion) on `items`, then `END`; an exception is put instead.
    `abandon()` makes it stop at its next chunk or retry wait and close the response.

    client: the SDK client (its `max_retries` is the number of our retries). request: the
    chat-completions body, `stream` left out. stream: ask for an SSE stream. deadline: the
    `time.monotonic()` instant past which no attempt or retry wait starts. model: named in errors.
    inline: run in the caller's thread (only for a transport with no network under it).
    """

    def __init__(self, client: openai.OpenAI, request: dict[str, Any], *, stream: bool, deadline: float,
                 model: str, inline: bool = False) -> None:
        self.client, self.request, self.stream, self.deadline, self.model = client, request, stream, deadline, model
        self.inline = inline
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.abandoned = threading.Event()
        # The caller's trace context (None when tracing is off): the HTTP request is a child of the chat span.
        self.trace_context = core_tracing.capture()

    def start(self) -> None:
        """Begin the exchange in a model-call thread and return at once; with `inline`, run it
        whole in the caller's thread first (an in-process transport that cannot wait on a network:
        `factory.in_process`), its items then read under the same deadline."""
        if self.inline:
            self.run()
        else:
            _submit(self.run)

    def abandon(self) -> None:
        self.abandoned.set()

    def run(self) -> None:
        token = core_tracing.attach(self.trace_context)
        try:
            self._run()
        finally:
            core_tracing.detach(token)

    def _run(self) -> None:
        try:
            response = self._create()
            if response is _ABANDONED:
                return
            if not self.stream:
                self._last(response)  # a JSON `null` body too: the caller answers MODEL_UNAVAILABLE
                self.items.put(END)
                return
            with response:
                for chunk in response:
                    if self.abandoned.is_set():
                        return
                    self.items.put(chunk)
            self._last(END)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._last(exc)

    def _last(self, item: Any) -> None:
        """Hand over the last item the caller reads, with this thread offered for the next call
        first (`_Worker.rest`)."""
        worker = threading.current_thread()
        if isinstance(worker, _Worker):
            worker.rest()
        self.items.put(item)

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
                # cost 1.8 ms per call (docs/performance.md). The answer comes back as the decoded JSON
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


def exchange_items(exchange: Exchange, deadline: float, seconds: float) -> Iterator[Any]:
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
        if item is END:
            return
        if isinstance(item, BaseException):
            raise item
        tracing.observe(item)  # usage and response model for the chat span; nothing when tracing is off
        yield item
