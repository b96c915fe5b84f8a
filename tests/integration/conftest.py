"""Fixtures for tests with real parts: the Redis broker and real `celery worker` processes that use
the test database pytest-django created.

Tests marked `services` need PostgreSQL (DATABASE_URL=postgres://...) and Redis
(CELERY_BROKER_URL=redis://host:port/N with a dedicated database number N > 0, because the queue is
purged); without them they are skipped with that reason (tests/conftest.py). They use
`transactional_db`, so what the test writes is committed and visible to the worker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
QUEUE = "celery"  # the default queue; the dedicated Redis database keeps it ours
REDIS_KEYS = (QUEUE, "unacked", "unacked_index", "unacked_mutex")
TIMEOUT = 30.0


def wait_for(predicate: Callable[[], Any], *, timeout: float = TIMEOUT, interval: float = 0.05,
             message: str = "condition", details: Callable[[], str] = lambda: "") -> Any:
    """Poll `predicate()` until it returns something truthy (returned) or `timeout` seconds pass
    (AssertionError naming `message`, plus `details()` such as a worker's log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {message}\n{details()}")
        time.sleep(interval)


def _redis():
    import redis

    return redis.Redis.from_url(BROKER_URL)


def _broker_db_number() -> int:
    path = urlsplit(BROKER_URL).path.strip("/")
    return int(path) if path.isdigit() else 0


@dataclass
class Broker:
    """The Redis database the tests and their workers share."""

    client: Any

    def queued(self) -> list[dict[str, Any]]:
        """Messages waiting in the default queue, decoded: [{"task", "id", "args", "raw"}]."""
        messages = []
        for raw in self.client.lrange(QUEUE, 0, -1):
            payload = json.loads(raw)
            headers = payload.get("headers") or {}
            messages.append({"task": headers.get("task"), "id": headers.get("id"),
                             "args": headers.get("argsrepr"), "raw": raw})
        return messages

    def duplicate(self, raw: bytes, times: int) -> None:
        """Put `times` more copies of exactly this message (same task id, same delivery tag) in
        the queue, as a broker redelivering it would."""
        for _ in range(times):
            self.client.lpush(QUEUE, raw)

    def purge(self) -> None:
        self.client.delete(*REDIS_KEYS)


@pytest.fixture
def broker(settings) -> Iterator[Broker]:
    """Tasks of this test process go to Redis (not eager), into a purged queue."""
    from agentplatform.celery import app

    if _broker_db_number() == 0:
        pytest.skip("integration tests purge the broker queue: point CELERY_BROKER_URL at a dedicated "
                    "Redis database, e.g. redis://127.0.0.1:6379/15 (.ci/run does)")
    settings.CELERY_TASK_ALWAYS_EAGER = False
    # The app reads Django settings through; make sure it sees the override.
    assert app.conf.task_always_eager is False and app.conf.broker_url == BROKER_URL
    client = _redis()
    broker = Broker(client)
    broker.purge()
    yield broker
    broker.purge()
    client.close()


@dataclass
class Worker:
    """One `celery worker` process group started by the `start_worker` fixture."""

    name: str
    process: subprocess.Popen
    log_path: Path
    stopped: bool = field(default=False)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 60) -> str:
        return f"--- log of worker {self.name} (last {lines} lines) ---\n" + "\n".join(self.log().splitlines()[-lines:])

    def count(self, text: str) -> int:
        """How many log lines contain `text`."""
        return sum(text in line for line in self.log().splitlines())

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and pool children) and reap it."""
        if self.stopped:
            return
        self.stopped = True
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=TIMEOUT)


def _database_url() -> str:
    db = connection.settings_dict
    auth = quote(db["USER"] or "postgres")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def start_worker(transactional_db, broker, tmp_path) -> Iterator[Callable[..., Worker]]:
    """start_worker(env=None, concurrency=2, wait=True) -> Worker: start a real
    `celery -A tests.integration.worker_app worker --pool=prefork` on the test database and the
    test broker, and wait until it answers a ping. Every worker started is killed at teardown,
    before the test database is flushed, even when the test failed."""
    from agentplatform.celery import app

    workers: list[Worker] = []

    def start(*, env: dict[str, str] | None = None, concurrency: int = 2, wait: bool = True) -> Worker:
        name = f"itest-{uuid.uuid4().hex[:8]}@localhost"
        log_path = tmp_path / f"{name.split('@')[0]}.log"
        environment = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "TEST_DATABASE_NAME": "",
            "CELERY_BROKER_URL": BROKER_URL,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "LLM_API_KEY": "",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        command = [sys.executable, "-m", "celery", "-A", "tests.integration.worker_app", "worker",
                   "--pool=prefork", f"--concurrency={concurrency}", "--loglevel=INFO", f"--hostname={name}",
                   "--without-gossip", "--without-mingle", "--without-heartbeat"]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        worker = Worker(name, process, log_path)
        workers.append(worker)
        if wait:
            def answers() -> bool:
                if process.poll() is not None:
                    raise AssertionError(f"worker {name} exited with {process.returncode}\n{worker.tail()}")
                return bool(app.control.ping(destination=[name], timeout=0.5))

            wait_for(answers, message=f"worker {name} to answer a ping", details=worker.tail)
        return worker

    yield start
    for worker in workers:
        worker.kill()
