"""Spans of the people's decisions on confirmation requests (docs/observability.md; the GenAI
conventions have no approval span yet, so the names and attributes are ours), at no cost when
tracing is off (core.tracing).

- `approval.decide`: one person's decision (approve, reject, edit, respond, withdraw, and the
  requester's confirm or cancel), around the decision's service, so the resume it enqueues after
  commit is sent from inside it. Attributes: the request id, the decision, the request's status
  after it, its quorum and the approvals counted so far. Never a name, an e-mail or a token.
- `approval.wait`: the wait between a request's creation and its settlement (confirmed, rejected,
  expired, withdrawn, ...), recorded when it settles with its real start time, in the trace of the
  run that waits (`core.tracing.run_carrier`), linked to the decision that ended it.
"""
from __future__ import annotations

import datetime
import functools
import time
from typing import Any, Callable

from django.db import transaction

from core import tracing
from approvals.models import Approval, ConfirmationRequest

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def decision(name: str) -> Callable[[Callable[..., ConfirmationRequest]], Callable[..., ConfirmationRequest]]:
    """Decorate a decision service (keyword arguments; `request_id` when it has one; returns the
    request) with the `approval.decide` span of decision `name`; a plain call when tracing is off."""

    def wrap(service: Callable[..., ConfirmationRequest]) -> Callable[..., ConfirmationRequest]:
        @functools.wraps(service)
        def traced(**kwargs: Any) -> ConfirmationRequest:
            if not tracing.on():
                return service(**kwargs)
            request_id = kwargs.get("request_id")
            with tracing.span("approval.decide", {
                "agentplatform.approval.decision": name,
                "agentplatform.approval.request.id": str(request_id) if request_id else None,
            }) as span:
                try:
                    request = service(**kwargs)
                except Exception as error:
                    tracing.set_attributes(span, {
                        "error.type": getattr(error, "code", None) or type(error).__name__,
                        "agentplatform.approval.request.id": str(getattr(error, "request_id", "") or "") or None})
                    raise
                decided(span, request)
                return request
        return traced

    return wrap


def decided(span: Any, request: ConfirmationRequest) -> None:
    """The request's facts after a decision: id, tool, status, quorum and approvals of its revision."""
    if span is None or not span.is_recording():
        return
    approvals = Approval.objects.filter(request_id=request.pk, revision=request.revision,
                                        decision=Approval.Decision.APPROVE).count()
    tracing.set_attributes(span, {
        "agentplatform.approval.request.id": str(request.pk), "gen_ai.tool.name": request.tool_name,
        "agentplatform.approval.status": request.status, "agentplatform.approval.policy": request.policy,
        "agentplatform.approval.quorum": request.quorum, "agentplatform.approval.approvals": approvals,
        "agentplatform.risk": request.risk,
    })


def settled(request: ConfirmationRequest) -> None:
    """Record `approval.wait` for `request`, which has just settled, once its transaction commits
    (a rolled-back decision ended no wait). Nothing when tracing is off."""
    if not tracing.on():
        return
    facts = (request.pk, request.run_id, request.tool_name, request.status, request.policy, request.risk,
             request.created_at)
    transaction.on_commit(lambda: _record_wait(*facts))


def _record_wait(request_id, run_id, tool_name, status, policy, risk, created_at) -> None:
    """The finished `approval.wait` span: from the request's creation to now, in its run's trace."""
    end_ns = time.time_ns()
    # In whole microseconds, as stored (a float timestamp loses the last digits).
    start_ns = (created_at - _EPOCH) // datetime.timedelta(microseconds=1) * 1000 if created_at else end_ns
    tracing.record("approval.wait", {
        "agentplatform.approval.request.id": str(request_id), "gen_ai.tool.name": tool_name,
        "agentplatform.approval.status": status, "agentplatform.approval.policy": policy,
        "agentplatform.risk": risk, "agentplatform.run.id": str(run_id) if run_id else None,
        "agentplatform.approval.wait_seconds": round((end_ns - start_ns) / 1e9, 3),
    }, start_ns=start_ns, end_ns=end_ns, parent=tracing.run_carrier(run_id))
