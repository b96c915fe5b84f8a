"""Serve an ASGI application in this process, on a free local port, for as long as a `with` block
lasts: how `manage.py demo` (which runs with no server) and bench/mcp_call.py reach `/mcp/` over
real HTTP. Not for production: `make serve` (gunicorn + uvicorn workers) serves the platform.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STARTUP_TIMEOUT_SECONDS = 15.0


def _free_socket(host: str) -> socket.socket:
    """A listening TCP socket on a port the kernel chose (no race between choosing and binding)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    return sock


@contextmanager
def served(app: Any, *, host: str = "127.0.0.1") -> Iterator[str]:
    """Run uvicorn with `app` (its lifespan included) in a daemon thread; yield the base URL
    "http://127.0.0.1:<port>" once it accepts connections; stop it (graceful, then forced) on exit.

    Raises RuntimeError when the server did not start within STARTUP_TIMEOUT_SECONDS."""
    import uvicorn

    sock = _free_socket(host)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="mcp-local-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError("the in-process server did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        if thread.is_alive():
            server.force_exit = True
            thread.join(timeout=5)
        sock.close()
