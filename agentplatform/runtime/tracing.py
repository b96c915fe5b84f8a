"""The `invoke_agent` span of a run (OpenTelemetry GenAI semantic conventions,
docs/observability.md), and the trace context a run keeps so that its resume continues its trace.

A run stores the W3C context of the span it started in (`Run.trace_context`, written with the run,
`stored_context`). Its resume, on a worker or in an approver's request, opens its `invoke_agent`
span as a child of that context and links the span that was current there (the Celery task, the
decision's request): one trace goes from the requester's message to the side effect. The approvals
below the runtime read a run's stored context through `core.tracing.run_carrier`, registered here
(`register`). At no cost when tracing is off.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings

from core import tracing
from agentplatform.llm.tracing import provider
from agentplatform.runtime.models import Run


def stored_context() -> dict[str, str]:
    """What a new run stores in `trace_context`: the current span's W3C carrier ({} when off)."""
    return tracing.carrier()


def invoke_agent(phase: str, run: Run | None = None):
    """The context manager of one stretch of a run: "start" (a new run; the current span is its
    parent), "resume" or "recover" (`run` continues the trace it stored). Yields the span (None
    when off); `run_known` / `run_ended` add the run's facts."""
    if not tracing.on():
        return tracing.OFF
    name, _, _ = provider()
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agentplatform",
                  "gen_ai.provider.name": name, "gen_ai.request.model": settings.LLM_MODEL,
                  "agentplatform.run.phase": phase}
    parent = (run.trace_context or None) if run is not None else None
    opened = tracing.span("invoke_agent", attributes, parent=parent, link_current=True)
    return _Known(opened, run)


class _Known:
    """The invoke_agent span's context manager, which adds the run's facts when it is known."""

    def __init__(self, opened: Any, run: Run | None) -> None:
        self.opened, self.run = opened, run

    def __enter__(self) -> Any:
        current = self.opened.__enter__()
        if self.run is not None:
            run_known(current, self.run)
        return current

    def __exit__(self, *exc: Any) -> Any:
        return self.opened.__exit__(*exc)


def run_known(span: Any, run: Run) -> None:
    """The run's ids on its span."""
    tracing.set_attributes(span, {"agentplatform.run.id": str(run.pk),
                                  "gen_ai.conversation.id": str(run.conversation_id),
                                  "agentplatform.tenant.id": run.tenant_id})


def run_ended(span: Any, run: Run) -> None:
    """How the stretch of the run ended: its status, model calls so far, stop reason or error code."""
    tracing.set_attributes(span, {"agentplatform.run.status": run.status,
                                  "agentplatform.run.iterations": run.iterations,
                                  "agentplatform.run.stop_reason": run.stop_reason or None,
                                  "error.type": run.error_code or None})


def _run_context(run_id: Any) -> dict[str, str] | None:
    """The trace context run `run_id` stored (core.tracing.run_carrier), None when unknown."""
    return Run.objects.filter(pk=run_id).values_list("trace_context", flat=True).first()


def register() -> None:
    """Let the layers below read a run's stored context (approval spans join the run's trace)."""
    tracing.register_run_lookup(_run_context)
