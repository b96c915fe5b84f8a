"""A local webhook receiver for tests: a threaded HTTP server that answers each POST with the next
scripted status (200 when the script is used up), optionally after a delay, and records every
request (headers and raw body) it got."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """`with Receiver() as r:` -> r.url; r.script([500, 500, 200]); r.delays([1.0]); r.received."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._statuses: list[int] = []
        self._delays: list[float] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    delay = receiver._delays.pop(0) if receiver._delays else 0.0
                    status = receiver._statuses.pop(0) if receiver._statuses else 200
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/approvals"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    def script(self, statuses: list[int]) -> None:
        self._statuses = list(statuses)

    def delays(self, seconds: list[float]) -> None:
        self._delays = list(seconds)

    def __enter__(self) -> "Receiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
