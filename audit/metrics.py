"""Prometheus metrics of seed 002 section 37, fed by the audit writer and the agent loop."""
from __future__ import annotations

from prometheus_client import Counter, Histogram

TOOL_DECISIONS = Counter(
    "agentplatform_tool_decisions_total", "Audited decisions on tool calls", ["tool", "decision", "status"]
)
TOOL_DURATION = Histogram(
    "agentplatform_tool_execution_duration_seconds", "Governed tool call duration (seconds)", ["tool"]
)
TOOL_RESULT_BYTES = Histogram(
    "agentplatform_tool_result_size_bytes", "Size of tool results sent to the model (bytes)", ["tool"],
    buckets=(256, 1024, 4096, 16384, 32768, 65536),
)
LOOP_ITERATIONS = Histogram(
    "agentplatform_tool_loop_iteration_count", "Model calls per run", buckets=(1, 2, 3, 4, 6, 8, 12)
)


def audit_decision(*, tool_name: str, decision: str, status: str) -> None:
    """Count one audited decision."""
    TOOL_DECISIONS.labels(tool=tool_name, decision=decision, status=status).inc()


def tool_finished(*, tool_name: str, seconds: float, result_bytes: int) -> None:
    """Observe one finished tool call: duration in seconds and result size in bytes."""
    TOOL_DURATION.labels(tool=tool_name).observe(seconds)
    TOOL_RESULT_BYTES.labels(tool=tool_name).observe(result_bytes)
