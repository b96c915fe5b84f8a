"""Fixtures of the remote-tool tests: a local MCP server built with the SDK
(mcp_sources.demo_server), started by the tests over stdio or streamable HTTP."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tools.support import install_tool, model  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]
OWNER = "Logistics integration team <logistics@example.com>"


@pytest.fixture(autouse=True)
def _fresh_specs():
    from mcp_sources import spec_cache

    spec_cache.forget()
    yield
    spec_cache.forget()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """`python -m mcp_sources.demo_server http <port>` in a child process (restartable with other env)."""

    def __init__(self, log: Path) -> None:
        self.log, self.port, self.process = log, _free_port(), None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, **env: str) -> "HttpServer":
        self.stop()
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "MCP_DEMO_LOG": str(self.log), **env}
        self.process = subprocess.Popen([sys.executable, "-m", "mcp_sources.demo_server", "http", str(self.port)],
                                        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.1)
        raise RuntimeError("the MCP test server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


@pytest.fixture
def executions(tmp_path) -> Path:
    """The file the MCP server appends one line to per executed side effect."""
    return tmp_path / "tickets.jsonl"


@pytest.fixture
def http_server(executions):
    server = HttpServer(executions).start()
    yield server
    server.stop()


def make_server(*, transport: str, name: str = "logistics", tenant=None, url: str = "", env=None, **fields):
    """An McpServer row for the demo server over `transport` ("stdio" or "http")."""
    from mcp_sources.models import McpServer

    if transport == "stdio":
        fields.update(command=sys.executable, args=["-m", "mcp_sources.demo_server", "stdio"],
                      env={"PYTHONPATH": str(ROOT), **(env or {})})
    else:
        fields.update(url=url)
    server = McpServer(name=name, tenant=tenant, transport=transport, owner=OWNER, **fields)
    server.full_clean()
    server.save()
    return server
