"""Server-Sent Events of a run (the WHATWG HTML standard's text/event-stream): one SSE event per stored RunEvent.

    id: <seq>
    event: <TYPE>
    data: <payload as one line of JSON>

The stream replays every event after the client's Last-Event-ID, then polls the database for new
ones (autocommit: each poll is its own short query, no transaction is held between polls), sends
a keep-alive comment while idle, and ends after DONE, when the run finished, or after
API_SSE_MAX_SECONDS (a browser's EventSource then reconnects with Last-Event-ID by itself).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

from django.conf import settings
from rest_framework.renderers import BaseRenderer

from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.selectors import run_events

BATCH = 200
RECONNECT_MILLISECONDS = 2000


class EventStreamRenderer(BaseRenderer):
    """Lets content negotiation accept `Accept: text/event-stream` (the view streams the body)."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return b"" if data is None else json.dumps(data).encode("utf-8")


def sse_event(event: RunEvent) -> bytes:
    """One RunEvent in SSE wire format (payload JSON on a single `data:` line)."""
    data = json.dumps(event.payload, ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode("utf-8")


def run_event_stream(*, run: Run, after_seq: int) -> Iterator[bytes]:
    """Yield the SSE bytes of `run`'s events with seq > after_seq, following new ones as stored.

    Bounded by API_SSE_MAX_SECONDS; polls every API_SSE_POLL_SECONDS; a comment every
    API_SSE_HEARTBEAT_SECONDS of silence keeps proxies from closing the connection.
    """
    poll = settings.API_SSE_POLL_SECONDS
    started = last_sent = time.monotonic()
    yield f"retry: {RECONNECT_MILLISECONDS}\n\n".encode()
    while True:
        batch = list(run_events(run=run, after_seq=after_seq)[:BATCH])
        for event in batch:
            yield sse_event(event)
            after_seq = event.seq
            if event.type == RunEvent.Type.DONE:
                return
        if len(batch) == BATCH:
            continue  # more are waiting: no sleep
        now = time.monotonic()
        if batch:
            last_sent = now
        else:
            finished = Run.objects.filter(pk=run.pk, status__in=(Run.Status.COMPLETED, Run.Status.FAILED)).exists()
            if finished and not run_events(run=run, after_seq=after_seq).exists():
                return  # finished, and its DONE was before our position
            if now - last_sent >= settings.API_SSE_HEARTBEAT_SECONDS:
                yield b": keep-alive\n\n"
                last_sent = now
        if now - started >= settings.API_SSE_MAX_SECONDS:
            return
        time.sleep(poll)
