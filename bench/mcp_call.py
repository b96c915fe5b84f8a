"""What the MCP transport adds to a governed LOW call.

The same governed call, `list_orders` with `{}` as acme's requester under one API key, is timed
two ways, interleaved, on one PostgreSQL database:

- in-process: `agentplatform.mcp_server.calls.call_tool(principal, name="list_orders", ...)`, the
  service the transport calls (the whole governed pipeline: offered tools, validation,
  permissions, policy, execution, masking, audit with the MCP channel);
- over MCP: `tools/call` from the official `mcp` client (streamable HTTP, one initialized session
  kept open, as an agent keeps it) to `/mcp/` of the platform served as `make serve` serves it
  (gunicorn + uvicorn worker, gunicorn.conf.py's connection pool) with one worker, in a separate
  process, Bearer API key.

Each iteration runs both in a shuffled order. Printed: median, p95, p99 of each, and the
difference of the medians (the transport's added time: HTTP, authentication of the key, JSON-RPC,
the worker thread hop, the result's serialisation, the client's parsing). A `ping` on the same
session, interleaved too, shows the floor of the transport alone (HTTP, the key's authentication,
the session, JSON-RPC; no tool).

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/mcp_call.py
       [--iterations 500] [--warmup 50]
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

KEY_NAME = "bench mcp_call"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """The production server as `make serve` runs it (gunicorn.conf.py: uvicorn workers, a psycopg
    pool of DB_POOL_MAX_SIZE=4 connections) with one worker, in a subprocess with the bench's
    environment (eager tasks, the offline model) and a metrics directory of its own; its log is
    printed when it does not start. Stops only its own process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile("w+", prefix="bench-mcp-server-", suffix=".log", delete=False)
        self.metrics = tempfile.mkdtemp(prefix="bench-mcp-metrics-")

    def __enter__(self) -> Server:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentplatform.settings", "PLATFORM_BASE_URL": self.url,
               "WEB_CONCURRENCY": "1", "WEB_BIND": f"127.0.0.1:{self.port}", "WEB_LOG_LEVEL": "warning",
               "LOG_LEVEL": "ERROR", "LOG_ACCESS": "0", "PROMETHEUS_MULTIPROC_DIR": self.metrics}
        command = [str(Path(sys.executable).parent / "gunicorn"), "agentplatform.asgi:application",
                   "--config", "gunicorn.conf.py"]
        self.process = subprocess.Popen(command, cwd=_common.ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.log.seek(0)
        self.__exit__()
        raise SystemExit(f"bench: the server did not start:\n{self.log.read()[-4000:]}")

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        os.unlink(self.log.name)
        shutil.rmtree(self.metrics, ignore_errors=True)


def principal_and_key(user):
    """A fresh API key of `user` (earlier bench keys revoked) and the Principal the transport
    would build for it. Returns (Principal, raw key)."""
    from knox.models import get_token_model

    from agentplatform.mcp_server.calls import Principal
    from agentplatform.tenancy.credentials import api_token_issue

    get_token_model().objects.filter(user=user, name=KEY_NAME).delete()
    raw = api_token_issue(user=user, name=KEY_NAME, expires_in_days=1)
    key = get_token_model().objects.filter(user=user, name=KEY_NAME).get()
    return Principal(user=user, api_key=key, client="bench/in-process"), raw


async def measure(*, url: str, key: str, principal, iterations: int, warmup: int) -> dict[str, list[float]]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from agentplatform.mcp_server import calls

    samples: dict[str, list[float]] = {"in-process calls.call_tool": [], "over MCP (streamable HTTP)": [],
                                       "MCP ping (transport alone)": []}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        async with streamable_http_client(f"{url}/mcp/", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def over_mcp() -> None:
                    result = await session.call_tool("list_orders", {})
                    assert not result.is_error, result

                async def in_process() -> None:
                    # The ORM is synchronous: run it where the transport runs it, in a worker thread.
                    answer = await asyncio.to_thread(calls.call_tool, principal, name="list_orders", arguments={})
                    assert answer.state == "completed", answer

                async def ping() -> None:
                    await session.send_ping()

                scenarios = {"in-process calls.call_tool": in_process, "over MCP (streamable HTTP)": over_mcp,
                             "MCP ping (transport alone)": ping}
                order = random.Random(7)
                for _ in range(warmup):
                    for run in scenarios.values():
                        await run()
                gc.collect()
                for _ in range(iterations):
                    for label in order.sample(list(scenarios), len(scenarios)):
                        started = time.perf_counter()
                        await scenarios[label]()
                        samples[label].append(_common.elapsed_ms(started))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    _common.setup()

    import _data

    user = _data.personas()["requester"]
    _data.reset(tenant=user.tenant)
    principal, key = principal_and_key(user)
    with Server() as server:
        _common.header("MCP: a governed LOW call over /mcp/ versus the same call in-process", notes=[
            "list_orders {} as acme's requester under one API key; the two interleaved in a shuffled order",
            f"{args.iterations} iterations after {args.warmup} warm-up; one MCP session kept open (streamable HTTP)",
            "server: gunicorn + uvicorn worker (gunicorn.conf.py, DB pool of 4), one worker, separate process",
            "in-process: the service the transport calls (mcp_server.calls.call_tool) in a worker thread",
        ])
        samples = asyncio.run(measure(url=server.url, key=key, principal=principal,
                                      iterations=args.iterations, warmup=args.warmup))
    from knox.models import get_token_model

    get_token_model().objects.filter(user=user, name=KEY_NAME).delete()
    medians, p95s = {}, {}
    for label, values in samples.items():
        s = _common.summary(values)
        medians[label], p95s[label] = s["median"], _common.percentile(values, 95)
        print(f"  {label:<32} n={s['n']:<5} median {s['median']:8.3f} ms   p95 "
              f"{_common.percentile(values, 95):8.3f} ms   p99 {s['p99']:8.3f} ms   min {s['min']:7.3f}")
    inproc, mcp, _ = medians.values()
    inproc95, mcp95, _ = p95s.values()
    print(f"\n  added by MCP: median {mcp - inproc:+.3f} ms ({mcp / inproc:.2f}x the in-process call), "
          f"p95 {mcp95 - inproc95:+.3f} ms")
    print(f"  {_common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
