"""Tracing is configured only by the standard OTEL_* variables, off by default (no SDK provider,
no instrumentation, not even imported), and configured once per process: the web process, each
gunicorn worker (post_fork) and each Celery pool process (worker_process_init), not the Celery
worker's main process. Processes are started fresh: a process installs its provider only once."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentplatform.ops import tracing
from core import tracing as spans
from tests.ops.tracing_support import spans as spans_on  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]
REPORT = """
import sys
from opentelemetry import trace
from core import tracing as spans
provider = trace.get_tracer_provider()
processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ())
print("REPORT", type(provider).__name__, spans.on(), len(processors),
      "opentelemetry.sdk" in sys.modules, "opentelemetry.instrumentation.django" in sys.modules)
"""


def _run(code: str, **env: str) -> list[str]:
    """Run `code` in a fresh Python with the project's settings and `env` added (OTEL_* removed
    first); returns its REPORT lines' words."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update({"DJANGO_SETTINGS_MODULE": "agentplatform.settings", **env})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code) + REPORT], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("REPORT")] + [[done.stdout]]


def test_the_exporters_come_from_otel_traces_exporter_and_none_or_nothing_is_off():
    assert tracing.exporter_names({}) == [] and tracing.exporter_names({"OTEL_TRACES_EXPORTER": ""}) == []
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "otlp, Console"}) == ["otlp", "console"]
    with pytest.raises(tracing.TracingMisconfigured, match="zipkin"):
        tracing.exporter_names({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(tracing.TracingMisconfigured, match="http/protobuf"):
        tracing._processor("otlp", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_off_configures_nothing_in_this_process():
    assert tracing.configure_tracing({}) is False
    assert tracing.configure_tracing({"OTEL_TRACES_EXPORTER": "none"}) is False
    assert not spans.on() and spans.span("x") is spans.OFF and spans.carrier() == {}


def test_without_otel_traces_exporter_no_provider_is_installed_and_the_sdk_is_not_even_imported():
    [report, _] = _run("import django; django.setup()")
    assert report == ["ProxyTracerProvider", "False", "0", "False", "False"]


def test_with_an_exporter_the_web_process_is_configured_once_and_exports_our_spans():
    [report, final, (out,)] = _run("""
        import django; django.setup()
        from agentplatform.ops.tracing import configure_tracing
        assert configure_tracing() is True  # ready() did it already: nothing is added
        from core import tracing as spans
        with spans.span("probe", {"agentplatform.probe": 1}):
            pass
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
        print("REPORT", [i().is_instrumented_by_opentelemetry for i in (
            DjangoInstrumentor, PsycopgInstrumentor, CeleryInstrumentor, HTTPX2ClientInstrumentor)])
    """, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="tracing-test")
    assert report == ["[True,", "True,", "True,", "True]"]
    assert final[:3] == ["TracerProvider", "True", "1"]  # one console processor: configured once
    assert '"name": "probe"' in out and '"service.name": "tracing-test"' in out


def test_the_sampler_comes_from_otel_traces_sampler():
    [report, (out,)] = _run("""
        import django; django.setup()
        from core import tracing as spans
        with spans.span("probe"):
            pass
    """, OTEL_TRACES_EXPORTER="console", OTEL_TRACES_SAMPLER="always_off")
    assert report[:3] == ["TracerProvider", "True", "1"] and '"name": "probe"' not in out


def test_the_celery_worker_main_process_leaves_tracing_to_its_pool_processes():
    [before, after, _] = _run("""
        from agentplatform.celery import app
        app.loader.worker_initialized = True  # as `celery worker` has it when Django is set up
        import django; django.setup()
        exec(REPORT_CODE)
        from celery import signals
        signals.worker_process_init.send(sender=None)  # in a pool process, after the fork
    """.replace("REPORT_CODE", repr(REPORT)), OTEL_TRACES_EXPORTER="console")
    assert before == ["ProxyTracerProvider", "False", "0", "False", "False"]
    assert after[:3] == ["TracerProvider", "True", "1"]


def test_a_gunicorn_worker_is_configured_in_post_fork_and_not_again_when_the_app_loads():
    [report, _] = _run("""
        import runpy
        conf = runpy.run_path("gunicorn.conf.py")
        conf["post_fork"](None, None)
        from core import tracing as spans
        assert spans.on()
        import django; django.setup()  # the worker loads the app: ApiConfig.ready
    """, OTEL_TRACES_EXPORTER="console")
    assert report[:3] == ["TracerProvider", "True", "1"]


def test_an_asgi_app_beside_django_is_wrapped_only_when_tracing_is_on(spans_on):
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    async def app(scope, receive, send):  # pragma: no cover - never called
        return None

    assert isinstance(tracing.wrap_asgi(app), OpenTelemetryMiddleware)
    spans.disable()
    assert tracing.wrap_asgi(app) is app
