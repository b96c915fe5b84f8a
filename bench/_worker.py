"""Start and stop a real Celery worker for a benchmark, on its own Redis database.

The worker is `celery -A agentplatform worker` in a subprocess with the bench's DATABASE_URL, the
given broker, CELERY_TASK_ALWAYS_EAGER=false and the offline model; its log goes to a temporary
file that is printed if it fails to start. Only the process this module started is stopped.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT


class Worker:
    """A Celery worker subprocess. Use as a context manager; `command` is what was run."""

    def __init__(self, *, broker_url: str, pool: str = "prefork", concurrency: int = 2, name: str = "bench",
                 extra_env: dict[str, str] | None = None) -> None:
        self.broker_url = broker_url
        self.extra_env = dict(extra_env or {})
        self.command = [sys.executable, "-m", "celery", "-A", "agentplatform", "worker", "-l", "info",
                        "--pool", pool, "--concurrency", str(concurrency), "-n", f"{name}-{os.getpid()}@%h",
                        "--without-gossip", "--without-mingle", "--without-heartbeat"]
        self.process: subprocess.Popen | None = None
        self.log = Path(tempfile.mkstemp(prefix="bench-worker-", suffix=".log")[1])

    def display(self) -> str:
        """The worker command line as a user would type it (environment that matters in front)."""
        extra = "".join(f"{k}={v} " for k, v in self.extra_env.items())
        return (f"CELERY_BROKER_URL={self.broker_url} CELERY_TASK_ALWAYS_EAGER=false {extra}DATABASE_URL=(same) "
                + " ".join(["celery", *self.command[3:]]))

    def __enter__(self) -> "Worker":
        purge(self.broker_url)
        env = {**os.environ, "CELERY_BROKER_URL": self.broker_url, "CELERY_TASK_ALWAYS_EAGER": "false",
               "LLM_API_KEY": "", "LOG_LEVEL": "WARNING", **self.extra_env}
        with self.log.open("wb") as log:
            # A session of its own, so a stuck pool can be stopped as one group (this process's only).
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if b" ready." in self.log.read_bytes():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        log = self.log.read_text(errors="replace")[-4000:]
        self.log.unlink(missing_ok=True)
        raise RuntimeError(f"the Celery worker did not start; its log:\n{log}")

    def __exit__(self, *exc) -> None:
        self.stop()
        self.log.unlink(missing_ok=True)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM); the worker's process group is killed if it is still up after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def purge(broker_url: str) -> int:
    """Drop messages a previous, interrupted benchmark left in the bench broker. Returns the count."""
    from agentplatform.celery import app

    with app.connection_for_write(broker_url) as connection:
        return app.control.purge(connection=connection)
