"""Rows with chosen times for the approval quality tests: requests, decisions and views whose
timestamps (auto_now_add on the models) are set afterwards with one UPDATE each."""
from __future__ import annotations

import datetime
import uuid

from approvals.models import Approval, ConfirmationRequest, RequestView
from tools.models import Tool

Status = ConfirmationRequest.Status
UTC = datetime.timezone.utc


def at(text: str) -> datetime.datetime:
    """An aware UTC time from "YYYY-MM-DD HH:MM[:SS]"."""
    fmt = "%Y-%m-%d %H:%M:%S" if text.count(":") == 2 else "%Y-%m-%d %H:%M"
    return datetime.datetime.strptime(text, fmt).replace(tzinfo=UTC)


def gated_request(requester, *, created: datetime.datetime, tool: str = "refund_order", status: str = Status.PENDING,
                  expires: datetime.datetime | None = None, confirmed: datetime.datetime | None = None,
                  decided: datetime.datetime | None = None, policy: str = "APPROVERS") -> ConfirmationRequest:
    """An approver-gated request of `requester`'s tenant created at `created` (expiry: an hour later)."""
    row = ConfirmationRequest.objects.create(
        tenant_id=requester.tenant_id, user=requester, conversation_id=uuid.uuid4(), tool=Tool.objects.get(name=tool),
        tool_name=tool, arguments={}, masked_arguments={}, arguments_hash=uuid.uuid4().hex, summary=f"{tool} call",
        risk="HIGH", policy=policy, quorum=1, status=status, expires_at=expires or created + datetime.timedelta(hours=1),
        confirmed_at=confirmed, decided_at=decided)
    ConfirmationRequest.objects.filter(pk=row.pk).update(created_at=created)
    row.refresh_from_db()
    return row


def decide(request: ConfirmationRequest, approver, decision: str, *, seconds: float) -> Approval:
    """`approver`'s decision on `request`, `seconds` after the request was created."""
    row = Approval.objects.create(request=request, approver=approver, decision=decision, revision=0)
    Approval.objects.filter(pk=row.pk).update(created_at=request.created_at + datetime.timedelta(seconds=seconds))
    row.refresh_from_db()
    return row


def view(request: ConfirmationRequest, user, *, seconds: float) -> RequestView:
    """`user` opened `request`'s facts `seconds` after it was created."""
    return RequestView.objects.create(tenant_id=request.tenant_id, request=request, user=user,
                                      viewed_at=request.created_at + datetime.timedelta(seconds=seconds))
