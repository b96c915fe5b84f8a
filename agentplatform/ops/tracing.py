"""OpenTelemetry tracing of a process, configured only by the standard OTEL_* variables
(docs/observability.md, docs/configuration.md "Tracing").

Off by default: with OTEL_TRACES_EXPORTER unset, empty or `none`, `configure_tracing` installs
nothing (no SDK provider, no instrumentation) and our span helpers (core.tracing) return at once.
On, it installs the SDK's TracerProvider (resource from OTEL_SERVICE_NAME and
OTEL_RESOURCE_ATTRIBUTES, sampler from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG), one span
processor per exporter named (`otlp`: OTLP over HTTP/protobuf to OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, batched; `console`: printed as each span ends), the
instrumentations of Django (ASGI and WSGI), Celery, psycopg and the httpx2 client (the model
client and the MCP client use it), less those OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names, and
our own spans.

Once per process: the web process calls it from the API app's `ready`, each gunicorn worker from
`post_fork` (gunicorn.conf.py; its `ready` then finds it done), each Celery pool process from
`worker_process_init` (a worker's main process, which runs no task, leaves it to them unless its
pool does not fork: solo, threads).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from core import tracing as spans

logger = logging.getLogger(__name__)

EXPORTERS = ("otlp", "console")
INSTRUMENTATIONS = ("django", "celery", "psycopg", "httpx2")
_configured_pid: int | None = None


class TracingMisconfigured(ValueError):
    """An OTEL_* value this platform cannot honour (an unknown exporter, the grpc protocol)."""


def exporter_names(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The exporters OTEL_TRACES_EXPORTER names ([] when unset, empty or `none`: tracing is off).
    Raises TracingMisconfigured for a name not in EXPORTERS."""
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise TracingMisconfigured(f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}; this platform exports "
                                   f"to {', '.join(EXPORTERS)} or none")
    return names


def configure_tracing(environ: Mapping[str, str] = os.environ) -> bool:
    """Switch tracing on for this process as `environ`'s OTEL_* variables say; returns whether it
    is on. Idempotent per process (a second call, or one in a process whose parent configured it
    before forking, changes nothing). Raises TracingMisconfigured (see `exporter_names`)."""
    global _configured_pid
    names = exporter_names(environ)
    if not names:
        return False
    if _configured_pid is not None:
        return True  # this process, or the parent it was forked from (the SDK re-arms its threads)
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "agentplatform"})
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER(_ARG)
    for name in names:
        provider.add_span_processor(_processor(name, environ))
    trace.set_tracer_provider(provider)
    _instrument(provider, environ)
    spans.enable(provider)
    _configured_pid = os.getpid()
    logger.info("tracing on: exporters %s, service %s", ",".join(names), resource.attributes.get("service.name"))
    return True


def _processor(name: str, environ: Mapping[str, str]):
    """The span processor of exporter `name`: `otlp` batched, `console` at once."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    if name == "console":
        return SimpleSpanProcessor(ConsoleSpanExporter())
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf")
    if protocol != "http/protobuf":
        raise TracingMisconfigured(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: this platform exports OTLP over "
                                   f"http/protobuf only (point it at the collector's HTTP port, 4318)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return BatchSpanProcessor(OTLPSpanExporter())  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*


def _instrument(provider, environ: Mapping[str, str]) -> None:
    """Instrument Django, Celery, psycopg and httpx2 with `provider`, less the disabled ones."""
    disabled = {n.strip() for n in environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}
    if "django" not in disabled:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument(tracer_provider=provider)
    if "celery" not in disabled:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument(tracer_provider=provider)
    if "psycopg" not in disabled:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        # No SQL comments carrying the trace context: prepared statements stay shared.
        PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False)
    if "httpx2" not in disabled and "httpx" not in disabled:
        from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor

        HTTPX2ClientInstrumentor().instrument(tracer_provider=provider)


def is_celery_worker_main() -> bool:
    """True in a Celery worker's (or beat's) main process, which has set Django up to import the
    tasks (its loader's `worker_initialized`): tracing waits for the pool's processes there."""
    from agentplatform.celery import app

    return bool(getattr(app.loader, "worker_initialized", False))


def connect_celery_signals() -> None:
    """Configure tracing in each Celery pool process as it starts, and in a worker's main process
    whose pool does not fork (solo, threads, gevent)."""
    from celery import signals

    @signals.worker_process_init.connect(weak=False, dispatch_uid="ops.tracing.pool_process")
    def _pool_process(**_) -> None:
        configure_tracing()

    @signals.worker_init.connect(weak=False, dispatch_uid="ops.tracing.worker")
    def _worker(sender=None, **_) -> None:
        pool = getattr(sender, "pool_cls", "")
        pool = pool if isinstance(pool, str) else f"{getattr(pool, '__module__', '')}.{getattr(pool, '__name__', '')}"
        if "prefork" not in pool:
            configure_tracing()


def configure_process() -> bool:
    """What the API app's `ready` calls in every process that sets Django up: configure tracing
    now, except in a Celery worker's main process (its pool processes do, `connect_celery_signals`).
    Returns whether tracing is on."""
    connect_celery_signals()
    if is_celery_worker_main():
        return False
    return configure_tracing()


def wrap_asgi(app):
    """`app` (an ASGI application served beside Django's, such as the MCP endpoint) wrapped in the
    ASGI instrumentation's middleware when tracing is on, so its requests are server spans and
    the governed calls they make are their children; `app` itself when tracing is off."""
    if not spans.on():
        return app
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    return OpenTelemetryMiddleware(app)
