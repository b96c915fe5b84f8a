"""Prometheus metrics for watching the platform in production, fed by the audit writer (every
audited decision) and the tool pipeline (every governed call).

Names are prefixed `agentplatform_`; prometheus-client adds `_total` to counters
on exposition (`agentplatform_tool_execution_count_total`). Labels are the dimensions operators slice by:
tool, model, tenant, scenario and prompt version. Rates are not stored: success and failure are
counters and a dashboard divides them (`rate(..._success_rate_total) / rate(..._execution_count_total)`),
which is what the HELP text says.

Label cardinality is bounded: tool names the model invents (TOOL_NOT_FOUND) are `_unknown`; a
process keeps at most METRICS_MAX_LABEL_VALUES distinct tools and tenants, later ones count as
`_other`; the model is the configured one; scenario is `-` (runs carry no scenario yet) and the
prompt version is a short hash of the system prompt (set by the runtime).

Several processes (web workers, Celery workers) add up through prometheus-client's multiprocess
mode when PROMETHEUS_MULTIPROC_DIR is set (docs/operations.md, "Metrics").
"""
from __future__ import annotations

import threading
from collections.abc import Iterable

from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

DIMENSIONS = ("tool", "model", "tenant", "scenario", "prompt_version")
RUN_DIMENSIONS = ("model", "tenant", "scenario", "prompt_version")
_prompt_version = "-"  # the runtime names its system prompt's version once it is ready


def prompt_version_set(version: str) -> None:
    """Name the version of the system prompt the runs of this process are driven by (the
    `prompt_version` label). Called once by the runtime when the app registry is ready; audit is
    below the runtime and never imports it."""
    global _prompt_version
    _prompt_version = version


def _counter(name: str, help_text: str, labels=DIMENSIONS) -> Counter:
    return Counter(f"agentplatform_{name}", help_text, list(labels))


TOOL_SELECTION = _counter("tool_selection_count", "Tool calls the model proposed that entered the governed pipeline")
TOOL_EXECUTION = _counter("tool_execution_count", "Tool calls executed (the side effect or read ran)")
TOOL_SUCCESS = _counter("tool_success_rate", (
    "Executed tool calls that succeeded; a counter: success rate = rate(tool_success_rate_total) / "
    "rate(tool_execution_count_total)"))
TOOL_FAILURE = _counter("tool_failure_rate", (
    "Executed tool calls that failed; a counter: failure rate = rate(tool_failure_rate_total) / "
    "rate(tool_execution_count_total)"))
TOOL_ARGUMENT_INVALID = _counter("tool_argument_validation_failure_count",
                                 "Tool calls refused because their arguments failed validation")
TOOL_PERMISSION_DENIED = _counter("tool_permission_denied_count",
                                  "Tool calls refused by permissions, whitelist or policy")
TOOL_CONFIRMATION_REQUIRED = _counter("tool_confirmation_required_count",
                                      "Tool calls that needed a confirmation or an approval")
TOOL_CONFIRMATION_EXPIRED = _counter("tool_confirmation_expired_count",
                                     "Confirmation requests that expired before a decision")
TOOL_IDEMPOTENCY_HIT = _counter("tool_idempotency_hit_count",
                                "Tool calls answered from a stored idempotency record")
TOOL_DUPLICATE_PREVENTED = _counter("tool_duplicate_execution_prevented_count", (
    "Executions prevented because the same action ran or is running (idempotency hit, in progress, "
    "outcome unknown)"))
TOOL_OUTCOME_UNKNOWN = _counter("tool_outcome_unknown_count", (
    "Idempotency records found interrupted mid-execution (OUTCOME_UNKNOWN): an administrator must check"),
    labels=("tool", "tenant"))
TOOL_RESULT_BYTES = Histogram(
    "agentplatform_tool_result_size_bytes", "Size of tool results sent to the model (bytes)", list(DIMENSIONS),
    buckets=(256, 1024, 4096, 16384, 32768, 65536),
)
TOOL_DURATION_MS = Histogram(
    "agentplatform_tool_execution_duration_ms", "Governed tool call duration (milliseconds)", list(DIMENSIONS),
    buckets=(1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000),
)
LOOP_ITERATIONS = Histogram(
    "agentplatform_tool_loop_iteration_count", "Model calls per finished run", list(RUN_DIMENSIONS),
    buckets=(1, 2, 3, 4, 6, 8, 12),
)
# Every audited decision, by tool, decision and status code (the older, tool-level counter; dashboards use it).
TOOL_DECISIONS = Counter(
    "agentplatform_tool_decisions_total", "Audited decisions on tool calls", ["tool", "decision", "status"]
)

# The scheduled verification of each tenant's audit chain (audit.verify_checkpoint.chains_verify).
# "mostrecent": in multiprocess mode the value the latest run set wins, whichever worker ran it
# (a "max" would keep a cleared break at 1 while the process that saw it lives). The tenant label
# is not bounded (`bounded` would fold tenants into "_other", where one tenant's pass would hide
# another's break): tenants are created by operators, not by callers, so their number stays small.
AUDIT_CHAIN_BROKEN = Gauge(
    "agentplatform_audit_chain_broken", (
        "1 when the last verification of the tenant's audit hash chain found a fault (the ERROR log names it), "
        "0 when it passed"), ["tenant"], multiprocess_mode="mostrecent")
AUDIT_VERIFIED_SEQ = Gauge(
    "agentplatform_audit_verified_seq", "The chain_seq up to which the tenant's audit chain has verified (its checkpoint)",
    ["tenant"], multiprocess_mode="mostrecent")
AUDIT_VERIFY_SUCCESS = Gauge(
    "agentplatform_audit_verify_last_success_timestamp_seconds",
    "Unix time of the last verification of the tenant's audit chain that passed", ["tenant"],
    multiprocess_mode="mostrecent")

# Refusals that mean "not allowed": at the call (DENIED) or at consume time (REFUSED).
PERMISSION_CODES = frozenset({"PERMISSION_DENIED", "POLICY_DENIED", "TOOL_DISABLED", "TOOL_NOT_ALLOWED"})
DUPLICATE_CODES = frozenset({"IN_PROGRESS", "OUTCOME_UNKNOWN", "IDEMPOTENCY_CONFLICT"})

_seen: dict[str, set[str]] = {"tool": set(), "tenant": set(), "status": set()}
_seen_lock = threading.Lock()


def bounded(kind: str, value: str) -> str:
    """`value` as a label of `kind` ("tool", "tenant" or "status"), or "_other" once this process has seen
    METRICS_MAX_LABEL_VALUES distinct ones."""
    value = (value or "-")[:100]
    seen = _seen[kind]
    if value in seen:
        return value
    with _seen_lock:
        if len(seen) >= getattr(settings, "METRICS_MAX_LABEL_VALUES", 200):
            return "_other"
        seen.add(value)
    return value


def _labels(*, tool_name: str, tenant_id: int | str | None) -> dict[str, str]:
    return {"tool": bounded("tool", tool_name), "model": settings.LLM_MODEL[:60],
            "tenant": bounded("tenant", str(tenant_id) if tenant_id is not None else "-"),
            "scenario": "-", "prompt_version": _prompt_version}


def audit_decision(*, tool_name: str, decision: str, status: str, tenant_id: int | str | None = None) -> None:
    """Count one audited decision in TOOL_DECISIONS and in the execution counter it stands for.

    decision: an AuditEvent.Decision value; status: the stable result code (ToolResult.code) or
    the confirmation request's status.
    """
    if decision == "NOT_FOUND":
        tool_name = "_unknown"  # a name the model invented: never a label of its own
    # Bounded labels: a tool name, or a status such as an edit's REVISION_<n>, must not make a
    # new series per value (the model and the approvers choose them).
    status = "REVISION" if status.startswith("REVISION_") else bounded("status", status)
    TOOL_DECISIONS.labels(tool=bounded("tool", tool_name), decision=decision, status=status).inc()
    labels = _labels(tool_name=tool_name, tenant_id=tenant_id)
    if decision in ("EXECUTED", "FAILED"):
        TOOL_EXECUTION.labels(**labels).inc()
        (TOOL_SUCCESS if decision == "EXECUTED" else TOOL_FAILURE).labels(**labels).inc()
    elif decision == "INVALID":
        TOOL_ARGUMENT_INVALID.labels(**labels).inc()
    elif decision in ("DENIED", "REFUSED") and status in PERMISSION_CODES:
        TOOL_PERMISSION_DENIED.labels(**labels).inc()
    elif decision == "CONFIRMATION_REQUIRED":
        TOOL_CONFIRMATION_REQUIRED.labels(**labels).inc()
    elif decision == "EXPIRED" and status != "CONFIRMATION_EXPIRED":
        # The request's own expiry (approvals); the model being told CONFIRMATION_EXPIRED later is
        # the same expiry and is not counted again.
        TOOL_CONFIRMATION_EXPIRED.labels(**labels).inc()
    elif decision == "IDEMPOTENT_HIT":
        TOOL_IDEMPOTENCY_HIT.labels(**labels).inc()
        TOOL_DUPLICATE_PREVENTED.labels(**labels).inc()
    elif decision == "REFUSED" and status in DUPLICATE_CODES:
        TOOL_DUPLICATE_PREVENTED.labels(**labels).inc()
    if status == "OUTCOME_UNKNOWN" and decision == "RECOVERED":
        TOOL_OUTCOME_UNKNOWN.labels(tool=labels["tool"], tenant=labels["tenant"]).inc()


def audit_chain_verified(*, tenant_id: int | str, ok: bool, verified_seq: int, at: float) -> None:
    """Record one verification of a tenant's chain: broken 1/0 and, when `ok`, the chain_seq it has
    verified up to and `at` (Unix seconds) as the last success (a broken run leaves both as they were)."""
    tenant = str(tenant_id)
    AUDIT_CHAIN_BROKEN.labels(tenant=tenant).set(0 if ok else 1)
    if ok:
        AUDIT_VERIFIED_SEQ.labels(tenant=tenant).set(verified_seq)
        AUDIT_VERIFY_SUCCESS.labels(tenant=tenant).set(at)


def tool_finished(*, tool_name: str, seconds: float, result_bytes: int, tenant_id: int | str | None = None,
                  selected: bool = True) -> None:
    """Observe one governed pass of a proposed call: selection, duration (given in seconds, stored
    in ms) and result size in bytes."""
    labels = _labels(tool_name=tool_name, tenant_id=tenant_id)
    if selected:
        TOOL_SELECTION.labels(**labels).inc()
    TOOL_DURATION_MS.labels(**labels).observe(seconds * 1000.0)
    TOOL_RESULT_BYTES.labels(**labels).observe(result_bytes)


def run_finished(*, iterations: int, tenant_id: int | str | None) -> None:
    """Observe the model calls one finished run made."""
    labels = _labels(tool_name="-", tenant_id=tenant_id)
    del labels["tool"]
    LOOP_ITERATIONS.labels(**labels).observe(iterations)


# Counters and histograms labelled by tool and tenant; `initialise` creates their zero series.
_PER_TOOL = (TOOL_SELECTION, TOOL_EXECUTION, TOOL_SUCCESS, TOOL_FAILURE, TOOL_ARGUMENT_INVALID,
             TOOL_PERMISSION_DENIED, TOOL_CONFIRMATION_REQUIRED, TOOL_CONFIRMATION_EXPIRED, TOOL_IDEMPOTENCY_HIT,
             TOOL_DUPLICATE_PREVENTED, TOOL_RESULT_BYTES, TOOL_DURATION_MS)


def initialise(pairs: Iterable[tuple[str, str]]) -> int:
    """Create the zero-valued series of every metric above for each known (tool name, tenant id)
    pair, with this process's model and prompt version, so /metrics shows them before the first
    event (Prometheus' advice: initialise known label sets; a rate over a missing series is no
    rate). The decisions counter gets each tool's EXECUTED/OK series. Labels go through
    `bounded`, so known tools and tenants are the first to hold label slots. Returns the pairs
    initialised (the caller supplies them: audit imports no model above it)."""
    count = 0
    tenants = set()
    for tool_name, tenant_id in pairs:
        labels = _labels(tool_name=tool_name, tenant_id=tenant_id)
        for metric in _PER_TOOL:
            metric.labels(**labels)
        TOOL_OUTCOME_UNKNOWN.labels(tool=labels["tool"], tenant=labels["tenant"])
        TOOL_DECISIONS.labels(tool=labels["tool"], decision="EXECUTED", status=bounded("status", "OK"))
        tenants.add(tenant_id)
        count += 1
    for tenant_id in tenants:
        labels = _labels(tool_name="-", tenant_id=tenant_id)
        del labels["tool"]
        LOOP_ITERATIONS.labels(**labels)
    return count
