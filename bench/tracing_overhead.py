"""What tracing costs: off (the default) and on.

- off: the span helpers with no tracer (core.tracing): the execute_tool hook, the chat decorator's
  check and the carrier a run stores, each timed alone (µs per call);
- on: the governed LOW call `list_orders` (ToolCallingManager().execute_tool_calls, as
  bench/governance_overhead.py) with tracing off and with the SDK recording into an in-memory
  exporter (SimpleSpanProcessor; what a BatchSpanProcessor would do on its own thread is not
  counted), interleaved; the added time is the difference of the medians (ms per call).

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/tracing_overhead.py
       [--iterations 1000] [--warmup 100]
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

HELPER_CALLS = 200_000


def per_call_us(fn, calls: int = HELPER_CALLS) -> float:
    """Median over 5 rounds of the µs one call of `fn` takes (the loop's own cost subtracted)."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        spent = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(calls):
            pass
        rounds.append((spent - (time.perf_counter() - started)) / calls * 1e6)
    return statistics.median(rounds)


def off_costs(ctx) -> dict[str, float]:
    """µs per call of each hook with tracing off."""
    from core import tracing as spans
    from tools import tracing as tool_tracing
    from tools.calls import ToolCall
    from tools.results import ToolResult

    assert not spans.on()
    call, result = ToolCall("call_x", "list_orders", "{}"), ToolResult.ok({})

    def execute_tool():
        with tool_tracing.execute_tool(ctx, call):
            pass

    return {
        "execute_tool span (enter + exit)": per_call_us(execute_tool),
        "call_decided hook": per_call_us(lambda: tool_tracing.call_decided("EXECUTED", result)),
        "core.tracing.span()": per_call_us(lambda: spans.span("x")),
        "core.tracing.carrier()": per_call_us(spans.carrier),
    }


def on_span_us(ctx) -> float:
    """µs per execute_tool span with tracing on (start, attributes, end, export into memory)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from core import tracing as spans
    from tools import tracing as tool_tracing
    from tools.calls import ToolCall
    from tools.results import ToolResult

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    call, result = ToolCall("call_x", "list_orders", "{}"), ToolResult.ok({})

    def execute_tool():
        with tool_tracing.execute_tool(ctx, call):
            tool_tracing.call_decided("EXECUTED", result)
        exporter.clear()

    spans.enable(provider)
    try:
        return per_call_us(execute_tool, calls=5_000)
    finally:
        spans.disable()
        provider.shutdown()


def governed_added(ctx, *, iterations: int, warmup: int) -> tuple[list[float], list[float], int]:
    """(ms per call off, ms per call on, spans recorded per call) of the governed list_orders."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import _data
    from core import tracing as spans
    from tools.manager import ToolCallingManager

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    manager = ToolCallingManager()
    samples: dict[bool, list[float]] = {False: [], True: []}

    def one(i: int, traced: bool) -> float:
        if traced:
            spans.enable(provider)
        started = time.perf_counter()
        try:
            result = manager.execute_tool_calls(ctx, _data.assistant_message(f"call_t{i}", "list_orders", "{}"))
        finally:
            spans.disable()
        spent = _common.elapsed_ms(started)
        assert result.outcomes[0].result.success, result.outcomes[0].result
        return spent

    for i in range(warmup):
        one(i, i % 2 == 0)
    exporter.clear()
    gc.collect()
    order = random.Random(7)
    for i in range(iterations):
        both = [False, True]
        order.shuffle(both)
        for traced in both:
            samples[traced].append(one(warmup + 2 * i + traced, traced))
    recorded = len(exporter.get_finished_spans())
    provider.shutdown()
    return samples[False], samples[True], recorded // iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    _common.setup()
    import _data
    from tools.manager import ToolCallingManager

    user = _data.personas()["requester"]
    _data.reset(tenant=user.tenant)
    conversation = _data.conversation(user=user, label="tracing overhead")
    ctx = _data.tool_context(user=user, conversation_id=conversation.id)
    _, ctx = ToolCallingManager().resolve(ctx)
    _common.header("Tracing overhead: the span helpers off, and a governed LOW call traced into memory",
                   [f"helpers: {HELPER_CALLS} calls x 5 rounds, median; governed list_orders: {args.iterations} "
                    f"calls each way, interleaved, after {args.warmup} warm-up calls"])
    print("\noff (no tracer: the default)")
    for label, us in off_costs(ctx).items():
        print(f"  {label:<36} {us:8.3f} µs per call")
    off, on, per_call = governed_added(ctx, iterations=args.iterations, warmup=args.warmup)
    print("\non (SDK, SimpleSpanProcessor into an InMemorySpanExporter)")
    print(f"  {'execute_tool span + its audit hook':<36} {on_span_us(ctx):8.3f} µs per call")
    print("  " + _common.row("governed list_orders, tracing off", off))
    print("  " + _common.row("governed list_orders, tracing on", on))
    added = statistics.median(on) - statistics.median(off)
    print(f"  added per governed LOW call: {added:.3f} ms at the median, {min(on) - min(off):.3f} ms at the minimum "
          f"({per_call} span per call)")
    print(f"\nload average at the end: {_common.load_average()}")


if __name__ == "__main__":
    main()
