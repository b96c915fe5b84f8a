"""Our own spans, at no cost when tracing is off (docs/observability.md).

Uses only `opentelemetry-api`, never the SDK: without a configured tracer nothing here records
anything, and every helper returns at its first line (one read of a module global). Tracing is
switched on for the process by `agentplatform.ops.tracing.configure_tracing` (the standard
OTEL_* variables), which calls `enable()` with the SDK's provider; tests enable it with an
in-memory exporter (tests/ops/tracing_support.py).

The apps' hooks (`tools/tracing.py`, `approvals/tracing.py`, `agentplatform/llm/tracing.py`,
`agentplatform/runtime/tracing.py`) build their spans with these helpers. Attribute values are ids,
names, codes and counts: never arguments, results, tokens or keys, unless `capture_content()` adds
an already *masked* form (TRACING_CAPTURE_MASKED_CONTENT).
"""
from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any, Callable

from django.conf import settings
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

NAME = "agentplatform"
# What a helper returns when tracing is off: a reusable context manager that yields None.
OFF = nullcontext()
CONTENT_LIMIT = 4096  # characters of a captured masked argument or result (docs/observability.md)

_tracer: trace.Tracer | None = None
_propagator = TraceContextTextMapPropagator()
_run_lookup: Callable[[Any], dict[str, str] | None] | None = None


def enable(provider: trace.TracerProvider | None = None) -> None:
    """Record our spans with `provider`'s tracer (the global provider when None)."""
    global _tracer
    _tracer = (provider or trace.get_tracer_provider()).get_tracer(NAME)


def disable() -> None:
    """Stop recording our spans (tests; the process's provider is left as it is)."""
    global _tracer
    _tracer = None


def on() -> bool:
    """True when our spans are recorded in this process."""
    return _tracer is not None


def span(name: str, attributes: dict[str, Any] | None = None, *, parent: dict[str, str] | None = None,
         link_current: bool = False, kind: trace.SpanKind = trace.SpanKind.INTERNAL):
    """A context manager that records span `name` while its block runs and makes it current; it
    yields the span, or None when tracing is off (then it costs one global read).

    attributes: None values are left out. parent: a W3C carrier (`carrier()`) whose span becomes the
    parent instead of the current one (a resumed run continues the trace it started in);
    link_current: then also link the span that was current (the approver's request, the worker's task).
    An exception escaping the block is recorded on the span and re-raised."""
    tracer = _tracer
    if tracer is None:
        return OFF
    context, links = _parent(parent, link_current)
    return tracer.start_as_current_span(name, context=context, kind=kind, attributes=_clean(attributes),
                                        links=links)


def record(name: str, attributes: dict[str, Any] | None, *, start_ns: int, end_ns: int,
           parent: dict[str, str] | None = None, link_current: bool = True) -> None:
    """Record an already finished span `name` from `start_ns` to `end_ns` (nanoseconds since the
    epoch): a wait measured when it ends. parent: as for `span` (None: the current span);
    link_current: link the current span when a `parent` carrier is used. Nothing when off."""
    tracer = _tracer
    if tracer is None:
        return
    context, links = _parent(parent, link_current)
    started = tracer.start_span(name, context=context, attributes=_clean(attributes), links=links,
                                start_time=start_ns)
    started.end(end_time=max(end_ns, start_ns))


def set_attributes(target: trace.Span | None, attributes: dict[str, Any]) -> None:
    """Set `attributes` (None values left out) on `target`, when it records."""
    if target is not None and target.is_recording():
        target.set_attributes(_clean(attributes))


def carrier() -> dict[str, str]:
    """The current span context as a W3C carrier ({"traceparent": ..., ["tracestate": ...]}), to
    store and continue later; {} when off or when no span is current."""
    if _tracer is None:
        return {}
    found: dict[str, str] = {}
    _propagator.inject(found)
    return found


def capture() -> Any:
    """The current OpenTelemetry context, for a helper thread to `attach`; None when off."""
    return otel_context.get_current() if _tracer is not None else None


def attach(captured: Any) -> Any:
    """Make `captured` (from `capture()`) current in this thread; returns the token for `detach`."""
    return otel_context.attach(captured) if captured is not None else None


def detach(token: Any) -> None:
    """Undo `attach`."""
    if token is not None:
        otel_context.detach(token)


def register_run_lookup(lookup: Callable[[Any], dict[str, str] | None]) -> None:
    """Set the function that answers a run id with the W3C carrier its run stored
    (`Run.trace_context`); the runtime registers it, the approvals below it call `run_carrier`."""
    global _run_lookup
    _run_lookup = lookup


def run_carrier(run_id: Any) -> dict[str, str] | None:
    """The carrier stored by run `run_id` (None when off, unknown, or no lookup registered)."""
    if _tracer is None or run_id is None or _run_lookup is None:
        return None
    return _run_lookup(run_id) or None


def capture_content() -> bool:
    """True when the masked arguments and results may be added to spans (opt-in:
    TRACING_CAPTURE_MASKED_CONTENT, or the GenAI conventions' OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)."""
    return _tracer is not None and bool(getattr(settings, "TRACING_CAPTURE_MASKED_CONTENT", False))


def content(value: Any) -> str:
    """`value` (already masked by its caller) as compact JSON cut to CONTENT_LIMIT characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str, sort_keys=True)
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "…"


def _parent(parent: dict[str, str] | None, link_current: bool) -> tuple[Any, tuple]:
    """(the context to start a span in, its links) for a span continuing the `parent` carrier:
    (None, ()) without a valid carrier (the current span is the parent)."""
    if not parent:
        return None, ()
    context = _propagator.extract(parent)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None, ()
    current = trace.get_current_span().get_span_context()
    if link_current and current.is_valid:
        return context, (trace.Link(current),)
    return context, ()


def _clean(attributes: dict[str, Any] | None) -> dict[str, Any]:
    """`attributes` without None values; other values as OpenTelemetry takes them (str, bool,
    int, float, or a sequence of one of these); anything else as its str()."""
    if not attributes:
        return {}
    clean: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if not isinstance(value, (str, bool, int, float, list, tuple)):
            value = str(value)
        clean[key] = value
    return clean
