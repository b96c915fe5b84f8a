"""Celery entry point of the integration tests' workers: `celery -A tests.integration.worker_app worker`.

It is the real application (agentplatform.celery.app) plus one test-only hook, switched on by
environment variables set in the worker's environment only (never in the test process):

- AGENTPLATFORM_TEST_SLOW_TOOL_SECONDS: the cancellation business function makes its change,
  then sleeps this long before returning, i.e. while its transaction (consume + idempotency claim
  + order change) is still open. A worker killed during the sleep dies in the middle of a tool
  execution.
- AGENTPLATFORM_TEST_MARKER_DIR: each execution of that function, once its change is made (not
  yet committed), creates a file there, so the test knows the execution is under way and can
  count executions, committed or not.
- AGENTPLATFORM_TEST_PAUSE_DIR: a resume that holds its run and is about to answer its decided
  calls (consume and execute them) first creates `paused-<pid>` there, then waits until a file
  `go` appears: the point where the test stops the holder (SIGSTOP) with its lease held and
  nothing executed yet.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from celery.signals import worker_process_init

from agentplatform.celery import app

__all__ = ["app"]

SLOW_SECONDS = float(os.environ.get("AGENTPLATFORM_TEST_SLOW_TOOL_SECONDS") or 0)
MARKER_DIR = os.environ.get("AGENTPLATFORM_TEST_MARKER_DIR") or ""
PAUSE_DIR = os.environ.get("AGENTPLATFORM_TEST_PAUSE_DIR") or ""


@worker_process_init.connect
def _install_slow_cancellation(**_: object) -> None:
    """In each pool process (Django is set up by then): wrap catalog.services.order_cancel."""
    if not SLOW_SECONDS and not MARKER_DIR:
        return
    from tools.catalog import services

    real = services.order_cancel

    def order_cancel(**kwargs):
        result = real(**kwargs)
        if MARKER_DIR:
            Path(MARKER_DIR, f"order_cancel-{kwargs['order_id']}-{os.getpid()}-{uuid.uuid4().hex[:8]}").touch()
        time.sleep(SLOW_SECONDS)
        return result

    services.order_cancel = order_cancel


@worker_process_init.connect
def _install_pause_before_answering(**_: object) -> None:
    """In each pool process: wrap decided.answer_pending with the pause point (module docstring)."""
    if not PAUSE_DIR:
        return
    from agentplatform.runtime import decided

    real = decided.answer_pending

    def answer_pending(*args, **kwargs):
        Path(PAUSE_DIR, f"paused-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while not Path(PAUSE_DIR, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return real(*args, **kwargs)

    decided.answer_pending = answer_pending
