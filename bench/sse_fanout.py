"""Server-Sent Events fan-out: many Server-Sent Events clients on one run, against the production server.

Starts gunicorn (gunicorn.conf.py: uvicorn workers) with --workers 2 on PostgreSQL, opens
--clients streams (200) on one run, checks that one more client (the 201st) still connects, then
stores --events events in the run (one every --interval seconds, each carrying the time it was
written, DONE last) from this process, as a worker would. Prints:

- the most database connections open at once while the streams were open (all clients of the
  bench database but this script's own: its set-up, the sampler and the event writer, which
  stands for a worker), sampled every 20 ms;
- whether every client received every event, in order;
- the delay from an event's write (just before its INSERT commits) to its arrival at a client:
  median, p95 and max over all clients and events.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/sse_fanout.py
       [--clients 200] [--events 50] [--interval 0.1] [--workers 2] [--port 18799]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import _data  # noqa: E402


def start_server(*, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, "WEB_CONCURRENCY": str(workers), "WEB_BIND": f"127.0.0.1:{port}",
           "API_SSE_MAX_SECONDS": "600", "LOG_LEVEL": "ERROR", "LOG_ACCESS": "0", "WEB_LOG_LEVEL": "warning",
           "CELERY_TASK_ALWAYS_EAGER": "true"}
    env.pop("CELERY_BROKER_URL", None)
    return subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "agentplatform.asgi:application",
                             "--config", "gunicorn.conf.py"], cwd=_common.ROOT, env=env)


def wait_ready(port: int, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("bench: the server did not start")


class ConnectionSampler(threading.Thread):
    """Samples the number of connections to the bench database (others than `exclude`)."""

    def __init__(self, conninfo: str, exclude: set[int]) -> None:
        super().__init__(daemon=True)
        self.conninfo, self.exclude, self.max, self.samples = conninfo, exclude, 0, 0
        self.at_max: list = []
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            self.exclude.add(conn.info.backend_pid)
            while not self.stop.is_set():
                rows = conn.execute("SELECT pid, state, left(query, 60) FROM pg_stat_activity WHERE "
                                    "datname = current_database() AND NOT (pid = ANY(%s))",
                                    [list(self.exclude)]).fetchall()
                if len(rows) > self.max:
                    self.max, self.at_max = len(rows), rows
                self.samples += 1
                time.sleep(0.02)


async def client(http, url: str, token: str, connected: asyncio.Event | None, got: list, ready: list) -> None:
    headers = {"Authorization": f"Token {token}", "Accept": "text/event-stream"}
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.status_code
        seq = None
        async for line in response.aiter_lines():
            if line.startswith("retry:"):
                ready.append(1)
                if connected is not None:
                    connected.set()
            elif line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and seq is not None:
                payload = json.loads(line[6:])
                got.append((seq, time.time(), payload.get("sent_at")))
                if kind == "DONE":
                    return


async def main_async(args, *, run, token: str, write_events) -> dict:
    import httpx

    url = f"http://127.0.0.1:{args.port}/api/v1/runs/{run.pk}/events/"
    results: list[list] = [[] for _ in range(args.clients + 1)]
    ready: list = []
    limits = httpx.Limits(max_connections=args.clients + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120, connect=30), limits=limits) as http:
        tasks = [asyncio.create_task(client(http, url, token, None, results[i], ready)) for i in range(args.clients)]
        deadline = time.monotonic() + 60
        while len(ready) < args.clients and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        connected_at = len(ready)
        extra_connected = asyncio.Event()
        tasks.append(asyncio.create_task(client(http, url, token, extra_connected, results[-1], ready)))
        try:
            await asyncio.wait_for(extra_connected.wait(), 15)
            extra_ok = True
        except asyncio.TimeoutError:
            extra_ok = False
        await asyncio.sleep(1.0)  # let every stream settle into waiting
        await asyncio.to_thread(write_events)
        done, pending = await asyncio.wait(tasks, timeout=60)
        for task in pending:
            task.cancel()
    return {"results": results, "connected": connected_at, "extra_ok": extra_ok,
            "failed": sum(1 for t in done if t.exception() is not None) + len(pending)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=18799)
    args = parser.parse_args()
    _common.setup()
    _common.header("SSE fan-out: clients on one run against gunicorn + uvicorn workers", notes=[
        f"{args.clients} streams + 1, {args.workers} workers, {args.events} events {args.interval * 1000:.0f} ms apart"])

    from django.db import connection
    from rest_framework.authtoken.models import Token

    from agentplatform.runtime.events import EventRecorder
    from agentplatform.runtime.models import Run
    from agentplatform.api.sse_hub import _conninfo

    people = _data.personas()
    user = people["requester"]
    _data.reset(tenant=user.tenant)
    conversation = _data.conversation(user=user, label="sse fan-out")
    run = Run.objects.create(tenant_id=user.tenant_id, user=user, conversation=conversation, request_id="bench-sse",
                             state={"messages": []})
    token = Token.objects.get_or_create(user=user)[0].key
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        own_pid = cursor.fetchone()[0]

    # The writer (standing for a worker) has a connection of its own, opened before sampling starts.
    writer_pid: list[int] = []
    go, written = threading.Event(), threading.Event()

    def writer() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            writer_pid.append(cursor.fetchone()[0])
        recorder = EventRecorder(run)
        go.wait()
        for i in range(args.events):
            recorder.emit("TOOL_CALL_STARTED", {"tool": "bench", "tool_call_id": f"c{i}", "sent_at": time.time()})
            time.sleep(args.interval)
        recorder.emit("DONE", {"status": "COMPLETED", "sent_at": time.time()})
        written.set()

    def write_events() -> None:
        go.set()
        written.wait()

    server = start_server(port=args.port, workers=args.workers)
    sampler = None
    try:
        wait_ready(args.port)
        time.sleep(1.0)  # both workers up
        writer_thread = threading.Thread(target=writer, daemon=True)
        writer_thread.start()
        while not writer_pid:
            time.sleep(0.01)
        sampler = ConnectionSampler(_conninfo(), {own_pid, writer_pid[0]})
        sampler.start()
        outcome = asyncio.run(main_async(args, run=run, token=token, write_events=write_events))
    finally:
        if sampler is not None:
            sampler.stop.set()
            sampler.join(2)
        server.terminate()
        server.wait(20)

    expected = list(range(1, args.events + 2))
    in_order = sum(1 for got in outcome["results"] if [seq for seq, _, _ in got] == expected)
    delays = sorted((received - sent) * 1000 for got in outcome["results"] for _, received, sent in got if sent)
    p95 = delays[int(len(delays) * 0.95) - 1] if delays else float("nan")
    print(f"clients connected            : {outcome['connected']} of {args.clients}; "
          f"client {args.clients + 1} connected: {'yes' if outcome['extra_ok'] else 'NO'}")
    print(f"every event, in order        : {in_order} of {args.clients + 1} clients "
          f"({args.events + 1} events each); failed streams: {outcome['failed']}")
    print(f"database connections (max)   : {sampler.max} ({sampler.samples} samples, every 20 ms)")
    if os.environ.get("BENCH_VERBOSE"):
        for row in sampler.at_max:
            print("   ", row)
    if delays:
        print(f"event -> client delay (ms)   : median {statistics.median(delays):.1f}, p95 {p95:.1f}, "
              f"max {delays[-1]:.1f} over {len(delays)} deliveries")
    print(f"after                        : {_common.load_average()}")
    ok = (outcome["extra_ok"] and in_order == args.clients + 1 and sampler.max <= 10
          and delays and statistics.median(delays) < 100)
    print("result                       :", "PASS" if ok else "FAIL (targets: <= 10 connections, all in order, "
          "201st connects, median < 100 ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
