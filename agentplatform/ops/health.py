"""Liveness and readiness, for a load balancer or an orchestrator's probes.

- `GET /healthz`: the process answers (no database, no broker): 200 `{"status": "ok"}`.
- `GET /readyz`: the process can serve: the database answers `SELECT 1`, every migration is
  applied, and the broker (when CELERY_BROKER_URL is set) accepts a connection. 200 with each
  check's result, or 503 with the failing ones (`{"status": "unavailable", "checks": {...}}`).

Three small checks rather than django-health-check: its 4.x plugin set brings dnspython and a
template UI we do not need, and "migrations applied" is not among its checks.
No authentication (probes have none) and no detail beyond ok / the exception's class name.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from kombu import Connection


def check_database() -> None:
    """Raises when the default database does not answer `SELECT 1`."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_migrations() -> None:
    """Raises RuntimeError naming how many migrations are not applied."""
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        raise RuntimeError(f"{len(plan)} migrations not applied")


def check_broker() -> None:
    """Raises when the broker of CELERY_BROKER_URL refuses a connection within 3 s (skipped when eager)."""
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=3) as conn:
        conn.ensure_connection(max_retries=1, timeout=3)


def readiness_checks() -> dict[str, Callable[[], None]]:
    """The checks /readyz runs, by name: database and migrations always, broker with CELERY_BROKER_URL."""
    checks = {"database": check_database, "migrations": check_migrations}
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        checks["broker"] = check_broker
    return checks


@csrf_exempt  # nothing is changed here: a POST answers 405, not CSRF's HTML 403 page
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 while the process can answer HTTP."""
    return JsonResponse({"status": "ok"})


# How long one readiness check may take (seconds). A database that does not answer would
# otherwise hold the probe for the pool's timeout (DB_POOL_TIMEOUT, 30 s) per check; orchestrators
# give up on a probe after 1-10 s.
READYZ_CHECK_SECONDS = 3.0


class CheckTimeout(Exception):
    """A readiness check did not finish within READYZ_CHECK_SECONDS."""


def _run_bounded(check: Callable[[], None], seconds: float) -> None:
    """Run `check` in a thread of its own and wait at most `seconds`; raises what it raised, or
    CheckTimeout. A check still waiting finishes in the background (its thread closes its own
    database connection)."""
    outcome: dict[str, BaseException | None] = {}

    def body() -> None:
        try:
            check()
            outcome["error"] = None
        except BaseException as error:  # noqa: BLE001 - handed to the probe
            outcome["error"] = error
        finally:
            connections.close_all()

    worker = threading.Thread(target=body, name="readyz-check", daemon=True)
    worker.start()
    worker.join(seconds)
    if "error" not in outcome:
        raise CheckTimeout(f"no answer within {seconds:g} s")
    if outcome["error"] is not None:
        raise outcome["error"]


@csrf_exempt
@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when every check passes, else 503; each check's result and time in ms. Each
    check is bounded by READYZ_CHECK_SECONDS (an unreachable database answers 503 in seconds, not
    after the pool's timeout), and the migrations are not checked when the database did not answer."""
    results: dict[str, dict[str, object]] = {}
    ok = True
    for name, check in readiness_checks().items():
        if name == "migrations" and results.get("database", {}).get("status") != "ok":
            results[name] = {"status": "skipped", "ms": 0.0}  # it needs the database
            continue
        started = time.perf_counter()
        try:
            _run_bounded(check, READYZ_CHECK_SECONDS)
            results[name] = {"status": "ok"}
        except Exception as error:  # noqa: BLE001 - any failure means "not ready"
            ok = False
            results[name] = {"status": "error", "error": type(error).__name__}
        results[name]["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return JsonResponse({"status": "ok" if ok else "unavailable", "checks": results}, status=200 if ok else 503)
