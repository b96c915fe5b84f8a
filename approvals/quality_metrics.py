"""Prometheus metrics that make rubber-stamping alertable (docs/approvals.md, "Approval quality";
the rule ApprovalsRubberStamped in docs/monitoring/alerts.yaml).

- `agentplatform_approval_decision_seconds` (histogram; tool, decision, tenant): time to decide,
  from the request's creation to the approver's decision (the overview's median and p90);
- `agentplatform_approval_decisions_unviewed_total` (counter; same labels): decisions made
  without the approver opening the request's facts first;
- `agentplatform_approval_decisions_fast_total` (counter; same labels): decisions made less than
  APPROVAL_FAST_DECISION_SECONDS after the approver first opened the facts (disjoint from
  unviewed, so the two add up).

Observed once per Approval row, after its transaction commits (a rolled-back decision counts
nothing). Labels are bounded like the tool metrics (audit.metrics.bounded).
"""
from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from django.db import transaction
from prometheus_client import Counter, Histogram

from approvals.models import Approval, RequestView
from approvals.quality import fast_decision_seconds
from audit.metrics import bounded

LABELS = ["tool", "decision", "tenant"]
DECISION_SECONDS = Histogram(
    "agentplatform_approval_decision_seconds",
    "Seconds from an approver-gated request's creation to an approver's decision",
    LABELS, buckets=(5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600))
UNVIEWED = Counter("agentplatform_approval_decisions_unviewed",
                   "Approver decisions made without opening the request's facts first", LABELS)
FAST = Counter("agentplatform_approval_decisions_fast", (
    "Approver decisions made less than APPROVAL_FAST_DECISION_SECONDS after first opening the request's facts"),
    LABELS)
ZERO_DECISIONS = (Approval.Decision.APPROVE, Approval.Decision.EDIT, Approval.Decision.REJECT)


def observe(approval: Approval) -> None:
    """Count one decision (`approval`, with its request loaded or loadable): one indexed query for
    the approver's first view of the request before the decision."""
    request = approval.request
    first_view = (RequestView.objects.filter(request_id=approval.request_id, user_id=approval.approver_id,
                                             viewed_at__lte=approval.created_at)
                  .order_by("viewed_at").values_list("viewed_at", flat=True).first())
    labels = {"tool": bounded("tool", request.tool_name), "decision": approval.decision,
              "tenant": bounded("tenant", str(request.tenant_id))}
    DECISION_SECONDS.labels(**labels).observe(max((approval.created_at - request.created_at).total_seconds(), 0.0))
    if first_view is None:
        UNVIEWED.labels(**labels).inc()
    elif (approval.created_at - first_view).total_seconds() < fast_decision_seconds():
        FAST.labels(**labels).inc()


def approval_saved(sender, instance: Approval, created: bool = False, raw: bool = False, **kwargs) -> None:
    """post_save receiver of Approval (connected by approvals.apps): observe a new decision once its
    transaction commits. A failure to observe never fails the decision (robust on_commit)."""
    if created and not raw:
        transaction.on_commit(partial(observe, instance), robust=True)


def initialise(pairs: Iterable[tuple[str, str]]) -> None:
    """Create the zero-valued series of every known (tool, tenant) pair for the decisions that
    matter to the alert (approve, edit, reject), so a rate has a series after a restart. Labels
    pass through audit.metrics.bounded like observed ones."""
    for tool, tenant in pairs:
        for decision in ZERO_DECISIONS:
            labels = {"tool": bounded("tool", tool), "decision": decision, "tenant": bounded("tenant", tenant)}
            DECISION_SECONDS.labels(**labels)
            UNVIEWED.labels(**labels)
            FAST.labels(**labels)
