"""Links in notifications start with the configured base URL, and `make serve` / `make dev`
derive it from the address they bind, so links follow the port the server really listens on."""
from __future__ import annotations

import os
import runpy
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _conf() -> dict:
    """gunicorn.conf.py's names, read without keeping what it sets in os.environ (its
    PROMETHEUS_MULTIPROC_DIR would switch this test process's /metrics to multiprocess mode)."""
    saved = dict(os.environ)
    try:
        return runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    finally:
        os.environ.clear()
        os.environ.update(saved)


CONF = _conf()


@pytest.mark.parametrize(("bind", "https", "url"), [
    ("127.0.0.1:8765", False, "http://127.0.0.1:8765"),
    ("localhost:9001", True, "https://localhost:9001"),
    ("0.0.0.0:8080", False, "http://127.0.0.1:8080"),
    (":8081", False, "http://127.0.0.1:8081"),
    ("[::1]:9000", False, "http://[::1]:9000"),
    ("[::]:9002", False, "http://127.0.0.1:9002"),
    ("example.internal", False, "http://example.internal:8000"),
    ("unix:/run/agentplatform.sock", False, None),
])
def test_the_base_url_of_a_bound_address(bind, https, url):
    assert CONF["base_url_for_bind"](bind, https=https) == url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path, port: int, **env: str) -> str:
    """Start gunicorn with gunicorn.conf.py and `--bind 127.0.0.1:port` (what `make serve PORT=`
    runs) on an application answering its settings' PLATFORM_BASE_URL; return that answer."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PLATFORM_BASE_URL", "WEB_BIND")}
    environ.update({"WEB_CONCURRENCY": "1", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom"), **env})
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "tests.notifications.echo_base_url:app",
             "--config", "gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT, env=environ, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/", timeout=1).text
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(20)


def test_serve_derives_the_base_url_from_the_port_it_binds(tmp_path):
    port = _free_port()
    assert _serve(tmp_path, port) == f"http://127.0.0.1:{port}"


def test_a_configured_base_url_wins(tmp_path):
    assert _serve(tmp_path, _free_port(), PLATFORM_BASE_URL="https://approvals.example.com") == \
        "https://approvals.example.com"


def _make(*args: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("PORT", "PLATFORM_BASE_URL", "MAKEFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, env=environ, capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_make_serve_and_dev_bind_the_port_and_link_to_it():
    assert _make("serve", "PORT=8765").endswith("--config gunicorn.conf.py --bind 127.0.0.1:8765")
    assert _make("serve").endswith("--config gunicorn.conf.py")  # WEB_BIND or 127.0.0.1:8000
    dev = _make("dev", "PORT=8766")
    assert dev.startswith('PLATFORM_BASE_URL="${PLATFORM_BASE_URL:-http://127.0.0.1:8766}" ')
    assert dev.endswith("runserver 127.0.0.1:8766")
