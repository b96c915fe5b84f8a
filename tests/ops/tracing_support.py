"""Spans recorded in memory for the tracing tests: the SDK's InMemorySpanExporter behind our span
helpers (core.tracing), without installing a global provider (a process gets one only once)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core import tracing


class Recorded:
    """The spans finished so far, with the lookups the tests use."""

    def __init__(self, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
        self.provider, self.exporter = provider, exporter

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        """The finished spans called `name` (or starting with it, for "execute_tool " / "chat "), in end order."""
        return [s for s in self.all() if s.name == name or (name.endswith(" ") and s.name.startswith(name))]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.all()]}"
        return found[0]

    @staticmethod
    def parent_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
        return child.parent is not None and child.parent.span_id == parent.context.span_id \
            and child.context.trace_id == parent.context.trace_id

    def every_attribute_value(self) -> Iterator[tuple[str, str, str]]:
        """(span name, attribute key, value as text) of every attribute of every span, its events and
        links, and the resource."""
        for span in self.all():
            for key, value in (span.attributes or {}).items():
                yield span.name, key, str(value)
            for event in span.events:
                for key, value in (event.attributes or {}).items():
                    yield span.name, f"event:{event.name}:{key}", str(value)
            for link in span.links:
                for key, value in (link.attributes or {}).items():
                    yield span.name, f"link:{key}", str(value)
            yield span.name, "name", span.name

    def secrets_in(self, *secrets: str) -> list[tuple[str, str, str]]:
        """The attributes whose value contains one of `secrets` (ignoring spaces and dashes)."""
        def squeeze(text: str) -> str:
            return text.replace(" ", "").replace("-", "")
        wanted = [squeeze(s) for s in secrets if s]
        return [(n, k, v) for n, k, v in self.every_attribute_value() if any(w in squeeze(v) for w in wanted)]


@pytest.fixture
def spans() -> Iterator[Recorded]:
    """Tracing on for this test, into memory; off again afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield Recorded(provider, exporter)
    finally:
        tracing.disable()
        provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})
