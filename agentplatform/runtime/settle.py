"""Expiry and recovery that settle without a beat scheduler (docs/decisions.md, "Settling without beat").

With a broker and `celery beat`, the periodic tasks expire requests and recover runs. The embedded
default (`make demo` / `make serve`: no broker, eager tasks) has no beat, so two things do it
instead, and both stay on with a broker too, as a safety net when beat is down:

- `SettleOnReadMiddleware`: before a request is handled, requests past their deadline are expired
  (one indexed EXISTS when nothing is due); each expiry settles its run, which resumes with
  CONFIRMATION_EXPIRED on commit. So a page, list or run read after a deadline never shows it
  still waiting.
- `start_web_sweeper()`: a daemon thread the web process starts (wsgi.py / asgi.py) that does the
  same, and recovers stuck runs, every WEB_SWEEP_SECONDS (5 s; 0 turns it off), so expiry also
  settles within seconds when nobody reads.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable

from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse

from agentplatform.runtime import resume
from agentplatform.runtime.recovery import stuck_work_recover
from approvals import expiry

logger = logging.getLogger(__name__)

SETTLED_PREFIXES = ("/chat/", "/approvals/", "/admin/")


def settle_for(user) -> None:
    """Settle-on-read for `user`: expire what is due in their tenant (only theirs: a request never
    does another tenant's work). A failure is logged and never fails the read."""
    tenant_id = getattr(user, "tenant_id", None) if getattr(user, "is_authenticated", False) else None
    if not settings.APPROVALS_SETTLE_ON_READ or tenant_id is None:
        return
    try:
        expiry.confirmations_expire_due(tenant_id=tenant_id)
    except Exception:  # noqa: BLE001 - settling is a courtesy of the read, not its purpose
        logger.exception("settle-on-read failed; the sweeper or beat will expire later")


class SettleOnReadMiddleware:
    """Expire what is due in the signed-in user's tenant before a page under /chat/, /approvals/ or
    /admin/ is handled (APPROVALS_SETTLE_ON_READ, default on). API requests, authenticated by DRF
    after the middleware ran, settle in `ApiView.initial` with `settle_for`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(SETTLED_PREFIXES):
            settle_for(request.user)
        return self.get_response(request)


def sweep_once() -> dict[str, int]:
    """One sweep: expire due requests (their runs resume on commit) and push stuck runs.
    Returns {"expired": n, "runs": n}."""
    expired = expiry.confirmations_expire_due()
    found = stuck_work_recover()
    resume.push(found.run_ids)
    return {"expired": expired, "runs": len(found.run_ids)}


_started = threading.Event()


def start_web_sweeper() -> bool:
    """Start the web process's sweeper thread once (WEB_SWEEP_SECONDS > 0). Returns True when this
    call started it."""
    interval = settings.WEB_SWEEP_SECONDS
    # Under pytest the tests drive expiry and recovery themselves (and a thread touching the
    # test database outside a test would be refused).
    if interval <= 0 or _started.is_set() or "pytest" in sys.modules:
        return False
    _started.set()

    def loop() -> None:
        while True:
            time.sleep(interval)
            try:
                sweep_once()
            except Exception:  # noqa: BLE001 - a sweep that failed is retried at the next tick
                logger.exception("web sweep failed")
            finally:
                close_old_connections()

    threading.Thread(target=loop, name="agentplatform-web-sweeper", daemon=True).start()
    return True
