"""Reads of conversations, runs and events, always scoped by the reader's tenant and user."""
from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, QuerySet

from core.sql.select import select_rows
from core.errors import NotFoundError
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from approvals import presentation
from approvals.models import Approval, ConfirmationRequest
from approvals.selectors import outcome_of
from core.redaction.fields import mask_value


def _uuid(value) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError) as exc:
        raise NotFoundError("not found") from exc


def conversation_uuid(value) -> uuid.UUID:
    """`value` as a conversation id. Raises NotFoundError when it is not a UUID (as an unknown id)."""
    try:
        return _uuid(value)
    except NotFoundError:
        raise NotFoundError("conversation not found") from None


def conversations_for(*, user) -> QuerySet[Conversation]:
    """The user's own conversations in their tenant, newest first."""
    return Conversation.objects.filter(tenant_id=user.tenant_id, user=user)


def conversation_get(*, user, conversation_id) -> Conversation:
    """The user's conversation. Raises NotFoundError for unknown ids and other users' or tenants' ones."""
    conversation = conversations_for(user=user).filter(pk=_uuid(conversation_id)).first()
    if conversation is None:
        raise NotFoundError("conversation not found")
    return conversation


def run_get(*, user, run_id) -> Run:
    """The user's run. Raises NotFoundError for unknown ids and other users' or tenants' runs."""
    run = Run.objects.filter(pk=_uuid(run_id), tenant_id=user.tenant_id, user=user).first()
    if run is None:
        raise NotFoundError("run not found")
    return run


def run_events(*, run: Run, after_seq: int = 0) -> QuerySet[RunEvent]:
    """Events of `run` with seq > after_seq, in order."""
    return run.events.filter(seq__gt=after_seq).order_by("seq")


def memory_messages(*, conversation: Conversation, exclude_run: Run | None = None) -> list[dict]:
    """The conversation memory sent to the model: the last AGENT_MEMORY_WINDOW in-memory messages
    (user messages and final answers by default; AGENT_MEMORY_FULL_TOOL_TRACE adds tool
    calls and results), oldest first."""
    where: dict[str, Any] = {"conversation_id": conversation.pk, "in_memory": True}
    if exclude_run is not None:
        where["run_id__ne"] = exclude_run.pk
    # A prebuilt statement (core.sql.select.select_rows): read before every model call, where
    # the ORM's compile would cost more than the query (docs/performance.md).
    window = select_rows(Message, where, order_by=("-id",), limit=settings.AGENT_MEMORY_WINDOW)
    window.reverse()
    return [m.wire() for m in _answered_exchanges(window)]


def _answered_exchanges(window: list[Message]) -> list[Message]:
    """Drop what a provider rejects (full tool traces only): tool messages cut off from their
    assistant message by the window, and an assistant message whose tool calls are not all answered
    right after it (its run still waits for a confirmation, or failed)."""
    kept: list[Message] = []
    index = 0
    while index < len(window):
        message, end = window[index], index + 1
        if message.role == "tool":
            index = end
            continue
        while message.tool_calls and end < len(window) and window[end].role == "tool":
            end += 1
        answered = {m.tool_call_id for m in window[index + 1:end]}
        if not message.tool_calls or answered == {call.get("id") for call in message.tool_calls}:
            kept.extend(window[index:end])
        index = end
    return kept


def conversation_excerpt(*, conversation: Conversation, limit: int = 3) -> str:
    """The last few user messages, for approvers to see what led to a request."""
    rows = Message.objects.filter(conversation=conversation, role="user").order_by("-id")[:limit]
    return "\n".join(f"user: {m.content[:300]}" for m in reversed(list(rows)))


def conversation_messages(*, conversation: Conversation) -> QuerySet[Message]:
    """What a person sees of a conversation, oldest first: the user's messages and the assistant's
    final answers (assistant messages that request tools, and tool results, live in the run and
    the audit trail)."""
    return (Message.objects.filter(conversation=conversation)
            .filter(Q(role="user") | Q(role="assistant", tool_calls__isnull=True))
            .order_by("id"))


def conversation_latest_run(*, conversation: Conversation) -> Run | None:
    """The conversation's most recent run, or None before the first message."""
    return conversation.runs.order_by("-created_at").first()


def run_pending_requests(*, run: Run) -> list[ConfirmationRequest]:
    """The confirmation requests `run` waits for (empty unless AWAITING_CONFIRMATION), in the
    model's call order, each annotated with `approvals_count` (APPROVE decisions so far)."""
    pending: dict[str, str] = (run.state or {}).get("pending") or {}
    if not pending:
        return []
    rows = {str(r.pk): r for r in ConfirmationRequest.objects.filter(pk__in=list(pending.values()), run_id=run.pk)
            .annotate(approvals_count=Count("approvals", filter=Q(
                approvals__decision__in=(Approval.Decision.APPROVE, Approval.Decision.EDIT),
                approvals__revision=F("revision"))))}
    # Identical calls of one turn share one request: list it once.
    return [rows[cid] for cid in dict.fromkeys(pending.values()) if cid in rows]


def run_decisions(*, run: Run) -> list[dict]:
    """Every confirmation request of `run`, oldest first, with what humans decided on it: status,
    outcome code, who ended it (role and username) and why, and each approver's decision with
    its comment (approve comments included), so the requester sees what the approvers saw."""
    rows = (ConfirmationRequest.objects.filter(run_id=run.pk, tenant_id=run.tenant_id)
            .select_related("decided_by").prefetch_related("approvals__approver").order_by("created_at"))
    decisions = []
    for request in rows:
        # Free text written by people leaves the platform masked (core.redaction.text).
        decisions.append({
            "confirmation_id": request.pk, "tool_call_id": request.tool_call_id, "tool": request.tool_name,
            "summary": request.summary, "status": request.status, "outcome_code": request.outcome_code,
            "outcome": outcome_of(request)["outcome"],
            "decided_by": presentation.decider(request), "reason": mask_value("reason", request.decision_reason),
            "approvals": [{"approver": a.approver.get_username(), "decision": a.decision,
                           "comment": mask_value("comment", a.comment), "at": a.created_at}
                          for a in request.approvals.all()],
        })
    return decisions
