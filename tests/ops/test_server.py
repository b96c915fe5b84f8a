"""Serving, Server-Sent Events, metrics and logs against the production server process: gunicorn with two uvicorn
workers on the PostgreSQL test database (committed data: transactional tests)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Run
from agentplatform.runtime.services import conversation_create

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """Base URL of gunicorn (gunicorn.conf.py, 2 workers) on the test database; `.log()` its output."""
    db = connection.settings_dict
    port = _free_port()
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    if db.get("PASSWORD"):
        url = url.replace("@", f":{db['PASSWORD']}@", 1)
    env = {**os.environ, "DATABASE_URL": url, "WEB_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2",
           "API_SSE_HEARTBEAT_SECONDS": "0.5", "API_SSE_MAX_SECONDS": "30", "LOG_LEVEL": "INFO",
           "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom"), "WEB_SWEEP_SECONDS": "0", "LLM_API_KEY": ""}
    env.pop("CELERY_BROKER_URL", None)
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "agentplatform.asgi:application",
                                    "--config", "gunicorn.conf.py"], cwd=ROOT, env=env, stdout=out, stderr=out)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)

        class Server(str):
            def log(self) -> str:
                return log.read_text()

        yield Server(base)
    finally:
        process.terminate()
        process.wait(20)


@pytest.fixture
def live_run(requester):
    conversation = conversation_create(user=requester, title="live")
    run = Run.objects.create(tenant_id=requester.tenant_id, user=requester, conversation=conversation,
                             request_id="live", state={"messages": []})
    return run, api_token_issue(user=requester)


def _listen(base: str, run_id, token: str, lines: list, ready: threading.Event, stop: threading.Event) -> None:
    headers = {"Authorization": f"Token {token}", "Accept": "text/event-stream"}
    with httpx.stream("GET", f"{base}/api/v1/runs/{run_id}/events/", headers=headers, timeout=30) as response:
        lines.append(("status", response.status_code))
        for line in response.iter_lines():
            lines.append(("line", line))
            if line.startswith("retry:"):
                ready.set()
            if stop.is_set() or line == "event: DONE":
                return


def _server_connections() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, left(query, 40) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        return cursor.fetchall()


def test_live_events_reach_open_streams_in_order_with_heartbeats(server, live_run):
    run, token = live_run
    streams = []
    for _ in range(5):
        lines, ready, stop = [], threading.Event(), threading.Event()
        thread = threading.Thread(target=_listen, args=(server, run.pk, token, lines, ready, stop), daemon=True)
        thread.start()
        streams.append((thread, lines, ready))
    for _, _, ready in streams:
        assert ready.wait(15)
    time.sleep(1.2)  # idle: heartbeats
    recorder = EventRecorder(run)
    for i in range(10):
        recorder.emit("TOOL_CALL_STARTED", {"tool": "t", "tool_call_id": f"c{i}"})
    recorder.emit("DONE", {"status": "COMPLETED"})
    for thread, lines, _ in streams:
        thread.join(15)
        assert not thread.is_alive()
        text = [value for kind, value in lines if kind == "line"]
        assert ("status", 200) in lines
        assert [int(t[4:]) for t in text if t.startswith("id: ")] == list(range(1, 12))  # every event, in order
        assert ": keep-alive" in text


def test_streams_hold_no_connection_and_a_disconnect_frees_everything(server, live_run):
    run, token = live_run
    stops, threads = [], []
    for _ in range(30):
        lines, ready, stop = [], threading.Event(), threading.Event()
        thread = threading.Thread(target=_listen, args=(server, run.pk, token, lines, ready, stop), daemon=True)
        thread.start()
        assert ready.wait(15)
        stops.append(stop)
        threads.append(thread)
    time.sleep(1.5)
    open_now = _server_connections()
    # 30 streams: at most the two LISTEN connections and the pools' idle connections (<= 4 per worker)
    assert len(open_now) <= 10, open_now
    assert sum("LISTEN" in q for _, q in open_now) >= 1
    # when every client goes away
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join(5)  # the next heartbeat line lets each reader notice its stop
    # then the hubs drop their subscriptions and close their LISTEN connections
    deadline = time.monotonic() + 15
    while any("LISTEN" in q for _, q in _server_connections()) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any("LISTEN" in q for _, q in _server_connections())


def test_metrics_of_both_workers_add_up_and_logs_are_json_with_the_request_id(server, live_run):
    run, token = live_run
    for i in range(20):
        response = httpx.get(f"{server}/healthz", headers={"X-Request-ID": f"probe-{i}"})
        assert response.headers["X-Request-ID"] == f"probe-{i}"
    httpx.get(f"{server}/api/v1/runs/{run.pk}/", headers={"Authorization": f"Token {token}"})
    body = httpx.get(f"{server}/metrics").text
    total = sum(float(m.group(1)) for m in re.finditer(
        r'^agentplatform_http_requests_total\{[^}]*route="healthz"[^}]*status="200"[^}]*\} (\S+)$', body, re.M))
    assert total >= 20  # the fixture's own probes may add a few; each worker counted its share
    assert httpx.get(f"{server}/readyz").json()["status"] == "ok"
    time.sleep(0.5)
    records = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    access = [r for r in records if r.get("logger") == "agentplatform.access"]
    assert {f"probe-{i}" for i in range(20)} <= {r["request_id"] for r in access}
    run_line = next(r for r in access if r["path"] == f"/api/v1/runs/{run.pk}/")
    assert run_line["user_id"] == str(run.user_id) and run_line["tenant"] == str(run.tenant_id)
    assert token not in server.log()
