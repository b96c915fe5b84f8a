"""The requester's list of conversations: each with a status in words, searchable by its title
and by what the person wrote in it. One query per page, whatever its length (the status comes
from annotations, not a read per row)."""
from __future__ import annotations

from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from agentplatform.runtime.models import Conversation, Message, Run
from agentplatform.runtime.selectors import conversations_for
from approvals.models import ConfirmationRequest
from core import clock

MAX_QUERY_CHARS = 100

# status code -> what a person reads in the list
STATUS_WORDS: dict[str, str] = {
    "new": "New / 新对话",
    "waiting_for_you": "Waiting for you / 等待您确认",
    "waiting_for_approval": "Waiting for approval / 等待审批",
    "working": "Working / 处理中",
    "answered": "Answered / 已回复",
    "failed": "Failed / 失败",
    "stopped": "Stopped / 已停止",
}
_BY_RUN_STATUS = {Run.Status.RUNNING: "working", Run.Status.COMPLETED: "answered",
                  Run.Status.FAILED: "failed", Run.Status.CANCELLED: "stopped"}


def conversations_listed(*, user, query: str = "") -> QuerySet[Conversation]:
    """The user's conversations (their tenant), newest first, each annotated with `latest_status`
    (its newest run's status or None), `waits_for_you` (an open request of theirs in it needs
    their own confirmation) and `last_activity` (when its newest run last changed, else when the
    conversation did). query: words to find in the title or in a message
    the user wrote (case-insensitive; at most MAX_QUERY_CHARS characters are used)."""
    runs = Run.objects.filter(conversation_id=OuterRef("pk")).order_by("-created_at")
    mine = ConfirmationRequest.objects.filter(
        ConfirmationRequest.open_q(clock.now()), conversation_id=OuterRef("pk"), user_id=user.pk,
        tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.REQUESTER)
    rows = conversations_for(user=user).annotate(
        latest_status=Subquery(runs.values("status")[:1]), waits_for_you=Exists(mine),
        last_activity=Coalesce(Subquery(runs.values("updated_at")[:1]), F("updated_at")))
    query = (query or "").strip()[:MAX_QUERY_CHARS]
    if query:
        said = Message.objects.filter(conversation_id=OuterRef("pk"), role="user", content__icontains=query)
        rows = rows.filter(Q(title__icontains=query) | Exists(said))
    return rows.order_by("-updated_at")


def conversation_status(conversation: Conversation) -> str:
    """The status code of a conversation annotated by conversations_listed (a STATUS_WORDS key)."""
    latest = getattr(conversation, "latest_status", None)
    if latest is None:
        return "new"
    if latest == Run.Status.AWAITING_CONFIRMATION:
        return "waiting_for_you" if getattr(conversation, "waits_for_you", False) else "waiting_for_approval"
    return _BY_RUN_STATUS.get(latest, "answered")
