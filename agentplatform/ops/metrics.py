"""GET /metrics in the Prometheus text format.

What is exposed:
- the tool metrics of `audit.metrics` (counters and histograms written where tools
  are governed, in web and Celery processes alike);
- HTTP basics (`HttpMetricsMiddleware`): requests by method, route pattern and status, and their
  duration;
- Celery basics (`connect_celery_signals`, connected by the API app when Django starts): tasks by name and
  final state, and their duration;
- state read from the database at scrape time (`StateCollector`), the same whichever process is
  scraped: requests waiting and those near expiry, runs stuck, idempotency records in
  OUTCOME_UNKNOWN, runs finished recently by status and error code (the model error rate), and,
  on PostgreSQL, the database's open connections.

Processes add up through prometheus-client's multiprocess mode: every process (gunicorn workers,
Celery pool processes) writes its samples to files in PROMETHEUS_MULTIPROC_DIR, and the scraped
process merges them (`MultiProcessCollector`); gunicorn.conf.py clears the directory at start and
marks dead workers. Without PROMETHEUS_MULTIPROC_DIR (runserver, tests) the process's own registry
is served.

Known label sets start at zero (`known_series_initialise`, at the first scrape of each process):
every tool metric, the approval quality metrics and the Celery task counter get a zero-valued
series for each (tool, tenant) known then and each task registered, so a rate has a series after a
restart, before the first event of its kind (Prometheus' advice: initialise known label sets).

Access: METRICS_TOKEN (when set, `Authorization: Bearer <token>` is required) and
METRICS_ALLOWED_NETWORKS (client address in one of these CIDRs; default loopback only). Either
one admits a scrape; anything else answers 403. METRICS_ENABLED=0 answers 404.
"""
from __future__ import annotations

import datetime
import hmac
import ipaddress
import os
import threading
import time
from typing import Callable, Iterator

from celery import signals
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import (CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest,
                               multiprocess)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from core import clock, correlation

HTTP_REQUESTS = Counter("agentplatform_http_requests", "HTTP requests answered",
                        ["method", "route", "status"])
HTTP_DURATION = Histogram("agentplatform_http_request_duration_seconds",
                          "Time to the response's headers (streams: not their whole life), seconds",
                          ["method", "route"],
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
CELERY_TASKS = Counter("agentplatform_celery_tasks", "Celery tasks finished, by final state",
                       ["task", "state"])
CELERY_DURATION = Histogram("agentplatform_celery_task_duration_seconds", "Celery task run time (seconds)",
                            ["task"], buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600))
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
EXPIRING_SOON_SECONDS = 120  # "near expiry" of the dashboard and the alert rule


class HttpMetricsMiddleware:
    """Counts every request by method, route pattern (never the raw path: bounded) and status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = (match.route or match.view_name) if match is not None else "unmatched"
        method = request.method if request.method in METHODS else "OTHER"
        HTTP_REQUESTS.labels(method=method, route=route[:80], status=str(response.status_code)).inc()
        HTTP_DURATION.labels(method=method, route=route[:80]).observe(time.perf_counter() - started)
        return response


class StateCollector:
    """Gauges read from the database at each scrape (see the module docstring)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # Imported at the scrape: agentplatform.celery imports this module (for its Celery
        # signals) while the package loads, before Django's models can be.
        from agentplatform.runtime.models import Run
        from agentplatform.runtime.recovery import runs_needing_push
        from approvals.models import ConfirmationRequest
        from tools.models import IdempotencyRecord

        now = clock.now()
        waiting = ConfirmationRequest.objects.open(now=now)
        pending = GaugeMetricFamily("agentplatform_confirmations_pending",
                                    "Confirmation requests waiting for a decision", labels=["policy"])
        soon = GaugeMetricFamily("agentplatform_confirmations_expiring_soon", (
            f"Confirmation requests waiting that expire within {EXPIRING_SOON_SECONDS} s"), labels=["policy"])
        for row in waiting.values("policy").annotate(n=Count("pk")):
            pending.add_metric([row["policy"]], row["n"])
        near = now + datetime.timedelta(seconds=EXPIRING_SOON_SECONDS)
        for row in waiting.filter(expires_at__lte=near).values("policy").annotate(n=Count("pk")):
            soon.add_metric([row["policy"]], row["n"])
        yield pending
        yield soon
        yield GaugeMetricFamily("agentplatform_runs_stuck", (
            "Runs nobody drives although they could move (holder died, resume lost; see runtime/recovery.py)"),
            value=len(runs_needing_push(now=now, limit=1000)))
        unknown = IdempotencyRecord.objects.filter(status=IdempotencyRecord.Status.OUTCOME_UNKNOWN).count()
        yield GaugeMetricFamily("agentplatform_idempotency_outcome_unknown",
                                "Idempotency records in OUTCOME_UNKNOWN, waiting for an administrator", value=unknown)
        window = settings.METRICS_RECENT_SECONDS
        recent = GaugeMetricFamily("agentplatform_runs_finished_recent", (
            f"Runs that finished in the last {window} s, by status and error code (model error rate: "
            "error_code=~\"MODEL_.*\" over all)"), labels=["status", "error_code"])
        since = now - datetime.timedelta(seconds=window)
        finished = (Run.objects.filter(status__in=(Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.CANCELLED),
                                       updated_at__gte=since)
                    .values("status", "error_code").annotate(n=Count("pk")))
        for row in finished:
            recent.add_metric([row["status"], row["error_code"] or "-"], row["n"])
        yield recent
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
                yield GaugeMetricFamily("agentplatform_db_connections",
                                        "Open connections to this database (all clients)", value=cursor.fetchone()[0])


class SafeStateCollector(StateCollector):
    """StateCollector that reports a failed read as `agentplatform_state_up 0` instead of failing
    the whole scrape (the process metrics are still worth having when the database is down)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            families = list(super().collect())
        except Exception:  # noqa: BLE001 - /readyz says why; here only "state unavailable"
            families, up = [], 0
        else:
            up = 1
        yield GaugeMetricFamily("agentplatform_state_up", "1 when the database state could be read", value=up)
        yield from families


_state_registry = CollectorRegistry(auto_describe=False)
_state_registry.register(SafeStateCollector())


_known = {"done": False}
_known_lock = threading.Lock()


def known_tool_tenants() -> list[tuple[str, str]]:
    """(tool name, tenant id as text) of every registered tool and every tenant it may be offered
    to (a tenant's own remote tool: that tenant only), in one query."""
    from agentplatform.tenancy.models import Tenant
    from tools.models import Tool

    sql = (f"SELECT t.name, n.id FROM {Tool._meta.db_table} t CROSS JOIN {Tenant._meta.db_table} n "
           "WHERE t.registered AND (t.tenant_id IS NULL OR t.tenant_id = n.id) ORDER BY t.name, n.id")
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [(name, str(tenant_id)) for name, tenant_id in cursor.fetchall()]


def known_series_initialise() -> bool:
    """Create the zero-valued series of known label sets, once per process (see the module
    docstring). Safe before migrations: a database error leaves it undone, to be tried at the next
    scrape, and never fails the scrape. Returns whether it is done."""
    if _known["done"]:
        return True
    with _known_lock:
        if _known["done"]:
            return True
        try:
            with transaction.atomic():  # a savepoint when called inside a transaction: it stays usable
                pairs = known_tool_tenants()
        except DatabaseError:
            return False
        from approvals import quality_metrics
        from audit import metrics as tool_metrics

        tool_metrics.initialise(pairs)
        quality_metrics.initialise(pairs)
        _celery_tasks_initialise()
        _known["done"] = True
    return True


def _celery_tasks_initialise() -> None:
    from celery import current_app

    for name in current_app.tasks:
        if not name.startswith("celery."):  # Celery's own built-in tasks
            for state in ("SUCCESS", "FAILURE"):
                CELERY_TASKS.labels(task=name, state=state)


def exposition() -> bytes:
    """The whole exposition: the process (or every process, in multiprocess mode) and the state.
    Initialises the known label sets first (known_series_initialise)."""
    known_series_initialise()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return generate_latest(registry) + generate_latest(_state_registry)


def scrape_allowed(request: HttpRequest) -> bool:
    """True when the request carries METRICS_TOKEN as a bearer token, or comes from one of
    METRICS_ALLOWED_NETWORKS (REMOTE_ADDR; behind a proxy, restrict at the proxy or use the token)."""
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer ") and hmac.compare_digest(header[7:].strip().encode(), token.encode()):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(net, strict=False) for net in settings.METRICS_ALLOWED_NETWORKS)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition, or 403 (not allowed) / 404 (METRICS_ENABLED off)."""
    if not settings.METRICS_ENABLED:
        return HttpResponseNotFound()
    if not scrape_allowed(request):
        return HttpResponseForbidden("metrics: not allowed from here (METRICS_TOKEN / METRICS_ALLOWED_NETWORKS)\n",
                                     content_type="text/plain")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


def connect_celery_signals() -> None:
    """Count Celery tasks (state, duration) and, in multiprocess mode, mark an exiting pool
    process dead so its live gauges leave the sum."""
    started: dict[str, float] = {}

    @signals.task_prerun.connect(weak=False)
    def _prerun(task_id=None, **_):
        correlation.clear()
        started[task_id] = time.perf_counter()

    @signals.task_postrun.connect(weak=False)
    def _postrun(task_id=None, task=None, state=None, **_):
        begun = started.pop(task_id, None)
        name = getattr(task, "name", "?")
        CELERY_TASKS.labels(task=name, state=state or "UNKNOWN").inc()
        if begun is not None:
            CELERY_DURATION.labels(task=name).observe(time.perf_counter() - begun)

    @signals.worker_process_shutdown.connect(weak=False)
    def _shutdown(pid=None, **_):
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            multiprocess.mark_process_dead(pid or os.getpid())
