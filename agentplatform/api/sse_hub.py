"""Server-Sent Events of runs without a thread or a database connection per stream.

One `RunEventHub` per server process (per event loop) holds every open stream of that process:

- New events are learnt from PostgreSQL's `LISTEN agentplatform_run_events` on one connection of
  the process (the trigger of runtime migration 0005 sends `<run id>:<seq>` on each commit); on
  SQLite the hub polls the runs that have streams every API_SSE_POLL_SECONDS instead.
- For a run with new events the hub reads them once (one query, whatever the number of streams)
  and hands the same pre-rendered bytes to each stream's queue.
- Queries run on a small thread pool (API_SSE_DB_THREADS threads, 2 by default); each query closes
  its connection afterwards, so a process holds at most API_SSE_DB_THREADS + 1 connections for
  all its streams, and none while they are idle.

A stream (`run_event_stream_async`) first replays what is after its Last-Event-ID from the
database, then takes events from its queue (duplicates dropped by seq, a gap filled from the
database), sends a keep-alive comment after API_SSE_HEARTBEAT_SECONDS of silence, and ends after
DONE, when the run finished and nothing is left, or after API_SSE_MAX_SECONDS. A client that
disconnects cancels the generator; its `finally` unsubscribes at once.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections
from psycopg.conninfo import make_conninfo

from agentplatform.runtime.models import Run, RunEvent

logger = logging.getLogger(__name__)

CHANNEL = "agentplatform_run_events"
BATCH = 200
RECONNECT_MILLISECONDS = 2000
FINISHED = ("COMPLETED", "FAILED", "CANCELLED")

Event = tuple[int, str, bytes]  # (seq, type, SSE bytes)


def render(seq: int, type_: str, payload) -> bytes:
    """One event in SSE wire format (payload JSON on a single `data:` line); as agentplatform.api.sse."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"id: {seq}\nevent: {type_}\ndata: {data}\n\n".encode("utf-8")


def _fetch(run_id: str, after: int, before: int | None = None) -> list[Event]:
    """Events of `run_id` with after < seq (< before), at most BATCH, oldest first; closes its connection."""
    try:
        rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after)
        if before is not None:
            rows = rows.filter(seq__lt=before)
        return [(seq, type_, render(seq, type_, payload))
                for seq, type_, payload in rows.order_by("seq").values_list("seq", "type", "payload")[:BATCH]]
    finally:
        connection.close()


def _finished(run_id: str) -> bool:
    try:
        return Run.objects.filter(pk=run_id, status__in=FINISHED).exists()
    finally:
        connection.close()


def _close_connection() -> None:
    connection.close()  # resolved in the calling thread: its own connection


@dataclass(eq=False)
class Subscription:
    """One open stream: the run, the highest seq handed to it, its queue of events."""

    run_id: str
    position: int
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


class RunEventHub:
    """The streams of one process and event loop (see the module docstring)."""

    def __init__(self) -> None:
        self.subscriptions: dict[str, set[Subscription]] = {}
        self.executor = ThreadPoolExecutor(max_workers=settings.API_SSE_DB_THREADS,
                                           thread_name_prefix="agentplatform-sse-db")
        self._fetching: set[str] = set()
        self._dirty: set[str] = set()
        self._source: asyncio.Task | None = None
        self.fetches = 0  # queries made for fan-out (tests, bench)

    async def db(self, fn: Callable, *args):
        """Run `fn(*args)` on the hub's thread pool (bounded database use)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def subscribe(self, run_id: str, position: int) -> Subscription:
        sub = Subscription(run_id, position)
        self.subscriptions.setdefault(run_id, set()).add(sub)
        if self._source is None or self._source.done():
            self._source = asyncio.get_running_loop().create_task(self._run_source())
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self.subscriptions.get(sub.run_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscriptions[sub.run_id]

    def wake(self, run_id: str) -> None:
        """New events may exist for `run_id`: read them once and fan them out (coalesced)."""
        if run_id not in self.subscriptions:
            return
        if run_id in self._fetching:
            self._dirty.add(run_id)
            return
        self._fetching.add(run_id)
        asyncio.get_running_loop().create_task(self._fan_out(run_id))

    async def _fan_out(self, run_id: str) -> None:
        try:
            while True:
                self._dirty.discard(run_id)
                subs = self.subscriptions.get(run_id)
                if not subs:
                    return
                after = min(s.position for s in subs)
                self.fetches += 1
                events = await self.db(_fetch, run_id, after)
                for sub in list(self.subscriptions.get(run_id, ())):
                    for event in events:
                        if event[0] > sub.position:
                            sub.queue.put_nowait(event)
                            sub.position = event[0]
                if len(events) < BATCH and run_id not in self._dirty:
                    return
        except Exception:  # noqa: BLE001 - the streams' own idle checks go on; next wake retries
            logger.exception("reading new events of run %s failed", run_id)
        finally:
            self._fetching.discard(run_id)

    async def _run_source(self) -> None:
        """Learn of new events while any stream is open: LISTEN on PostgreSQL, else poll."""
        if connection.vendor == "postgresql":
            await self._listen()
        else:
            await self._poll()

    async def _poll(self) -> None:
        while self.subscriptions:
            await asyncio.sleep(settings.API_SSE_POLL_SECONDS)
            for run_id in list(self.subscriptions):
                self.wake(run_id)

    async def _listen(self) -> None:
        while self.subscriptions:
            try:
                conn = await psycopg.AsyncConnection.connect(_conninfo(), autocommit=True)
            except Exception:  # noqa: BLE001 - the database is down: streams poll until it is back
                logger.warning("LISTEN %s: cannot connect; polling meanwhile", CHANNEL)
                await self._poll_once_then_wait()
                continue
            try:
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    for run_id in list(self.subscriptions):
                        self.wake(run_id)  # anything stored while we were not listening
                    while self.subscriptions:
                        # Wake up now and then to notice that every stream is gone.
                        async for note in conn.notifies(timeout=5.0):
                            self.wake(note.payload.split(":", 1)[0])
            except Exception:  # noqa: BLE001 - connection lost: reconnect, re-read, go on
                logger.warning("LISTEN %s: connection lost; reconnecting", CHANNEL, exc_info=True)
                await asyncio.sleep(0.5)

    async def _poll_once_then_wait(self) -> None:
        for run_id in list(self.subscriptions):
            self.wake(run_id)
        await asyncio.sleep(settings.API_SSE_POLL_SECONDS)


def _conninfo() -> str:
    """psycopg conninfo of the default database (as Django would connect)."""
    params = connections["default"].settings_dict
    kwargs = {"dbname": params["NAME"], "user": params.get("USER") or None, "password": params.get("PASSWORD") or None,
              "host": params.get("HOST") or None, "port": str(params["PORT"]) if params.get("PORT") else None}
    options = params.get("OPTIONS") or {}
    for key in ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options"):
        if key in options:
            kwargs[key] = options[key]
    return make_conninfo(**{k: v for k, v in kwargs.items() if v is not None})


_hubs: dict[int, RunEventHub] = {}


def get_hub() -> RunEventHub:
    """The hub of the running event loop (one per loop: uvicorn has one per worker process)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(id(loop))
    if hub is None:
        hub = _hubs[id(loop)] = RunEventHub()
    return hub


async def run_event_stream_async(*, run_id: uuid.UUID | str, after_seq: int) -> AsyncIterator[bytes]:
    """The SSE bytes of the run's events with seq > after_seq, then the new ones as they commit.
    See the module docstring for heartbeats, the end of a stream and disconnects."""
    # The view's thread may still hold the request's connection: let it go for the stream's life.
    await sync_to_async(_close_connection)()
    run_id = str(run_id)
    hub = get_hub()
    sub = hub.subscribe(run_id, after_seq)
    started = last_sent = time.monotonic()
    sent = after_seq
    try:
        yield f"retry: {RECONNECT_MILLISECONDS}\n\n".encode()
        while True:  # replay what is stored after Last-Event-ID
            events = await hub.db(_fetch, run_id, sent)
            for seq, type_, data in events:
                yield data
                sent = seq
                if type_ == "DONE":
                    return
            if len(events) < BATCH:
                break
        sub.position = max(sub.position, sent)
        if events:
            last_sent = time.monotonic()
        while True:
            now = time.monotonic()
            remaining = settings.API_SSE_MAX_SECONDS - (now - started)
            if remaining <= 0:
                return
            wait = min(settings.API_SSE_HEARTBEAT_SECONDS - (now - last_sent), remaining)
            try:
                seq, type_, data = await asyncio.wait_for(sub.queue.get(), timeout=max(wait, 0.01))
            except asyncio.TimeoutError:
                if time.monotonic() - started >= settings.API_SSE_MAX_SECONDS:
                    return
                if await hub.db(_finished, run_id) and not await hub.db(_fetch, run_id, sent):
                    return  # finished, and its DONE was before our position
                yield b": keep-alive\n\n"
                last_sent = time.monotonic()
                continue
            if seq <= sent:
                continue  # already sent by the replay
            if seq > sent + 1:  # a gap (rare: events stored while we replayed): fill it in order
                for gap_seq, gap_type, gap_data in await hub.db(_fetch, run_id, sent, seq):
                    yield gap_data
                    sent = gap_seq
                    if gap_type == "DONE":
                        return
            yield data
            sent = seq
            last_sent = time.monotonic()
            if type_ == "DONE":
                return
    finally:
        hub.unsubscribe(sub)
