"""A tenant's approval history built in bulk for the list tests: approver-gated refund requests
of acme's requester, decided (with the decisions approvers made) or waiting."""
from __future__ import annotations

import datetime

from django.db import connection

from agentplatform.runtime.models import Conversation
from approvals.models import Approval, ConfirmationRequest
from core import clock
from tools.models import Tool

DECIDED = ("CONSUMED", "CONSUMED", "CANCELLED", "EXPIRED")  # ran, ran, rejected, nobody decided


def history_build(*, requester, approvers, decided: int, waiting: int, start: int) -> list[ConfirmationRequest]:
    """Add `decided` decided and `waiting` waiting requests (ids from `start`): the decided ones
    created a minute apart long ago (with a larger `start`, newer than an earlier call's), the
    waiting ones now. A request that ran carries an APPROVE of each of
    `approvers` (two users), a rejected one a REJECT of the second. Returns the rows."""
    conversation = Conversation.objects.create(tenant_id=requester.tenant_id, user=requester, title="lists")
    tool = Tool.objects.get(name="refund_order")
    now = clock.now()
    rows = []
    for n in range(start, start + decided + waiting):
        is_waiting = n >= start + decided
        rows.append(ConfirmationRequest(
            tenant_id=requester.tenant_id, user=requester, conversation_id=conversation.pk,
            tool_call_id=f"lists_{n}", tool_id=tool.pk, tool_name="refund_order",
            arguments={"order_id": f"A9{n:011d}", "amount": "10.00", "reason": "lists"},
            masked_arguments={"order_id": f"A9{n:011d}", "amount": "10.00", "reason": "lists"},
            arguments_hash=f"{n:064d}", summary=f"Refund CNY 10.00 on A9{n:011d}", risk="CRITICAL",
            policy="APPROVERS", quorum=2, status="PENDING" if is_waiting else DECIDED[n % len(DECIDED)],
            decided_at=None if is_waiting else now,
            expires_at=now + datetime.timedelta(hours=2) if is_waiting else now - datetime.timedelta(hours=1)))
    ConfirmationRequest.objects.bulk_create(rows, batch_size=2000)
    decisions = []
    for row in rows:
        if row.status == "CONSUMED":
            decisions += [Approval(request=row, approver=a, decision="APPROVE") for a in approvers]
        elif row.status == "CANCELLED":
            decisions.append(Approval(request=row, approver=approvers[1], decision="REJECT", comment="no"))
    Approval.objects.bulk_create(decisions, batch_size=2000)
    # created_at is auto_now_add: spread the decided ones a minute apart in the past, the highest n
    # the newest. The waiting ones keep theirs (now): an approver's standing must predate a request
    # for their decision to count (approvals.independence), and the seeds granted it a moment ago.
    ordered = sorted((r for r in rows if r.status != "PENDING"), key=lambda r: int(r.tool_call_id.split("_")[1]))
    base = now - datetime.timedelta(days=400) + datetime.timedelta(minutes=start)
    for n, row in enumerate(ordered):
        row.created_at = base + datetime.timedelta(minutes=n)
    ConfirmationRequest.objects.bulk_update(ordered, ["created_at"], batch_size=2000)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE approvals_confirmationrequest")
            cursor.execute("ANALYZE approvals_approval")
    return rows
