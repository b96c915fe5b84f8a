"""How one audit row reads on the auditor's page: plain bilingual words for the decision, the
tool's title, the result code as words, the approver's comment, and links for its ids."""
from __future__ import annotations

from dataclasses import dataclass

from django.urls import NoReverseMatch, reverse

from audit.models import AuditEvent
from core.redaction.endpoints import recorded_event_shown
from core.redaction.text import mask_text
from tools.display import tool_label

D = AuditEvent.Decision
DECISION_WORDS = {
    D.ALLOWED: "Allowed / 已允许", D.EXECUTED: "Ran / 已执行", D.FAILED: "Failed / 执行失败",
    D.IDEMPOTENT_HIT: "Repeat answered from the first run / 重复调用，未再执行", D.DENIED: "Denied / 已拒绝",
    D.INVALID: "Invalid call / 无效调用", D.NOT_FOUND: "Unknown tool / 未知工具",
    D.CONFIRMATION_REQUIRED: "Waiting for a person / 等待确认", D.CONFIRMED: "Confirmed by the requester / 申请人已确认",
    D.APPROVED: "Approved / 已批准", D.REJECTED: "Rejected / 已驳回", D.CANCELLED: "Cancelled / 已取消",
    D.EXPIRED: "Expired / 已过期", D.CONSUMED: "Used / 已使用", D.REFUSED: "Refused / 被拒",
    D.RECOVERED: "Recovered / 已恢复", D.EDITED: "Edited by an approver / 审批人已修改",
    D.RESPONDED: "Answered by an approver / 审批人已回复", D.WITHDRAWN: "Withdrawn / 已撤回",
    D.CONTROL_CHANGE: "Setting changed / 设置变更",
}
# Rows whose message is a person's own words about a decision.
COMMENTED = {D.APPROVED, D.REJECTED, D.EDITED, D.RESPONDED, D.WITHDRAWN, D.CANCELLED, D.CONFIRMED}
TONE = {D.EXECUTED: "ok", D.IDEMPOTENT_HIT: "ok", D.APPROVED: "ok", D.CONFIRMED: "ok", D.CONSUMED: "ok",
        D.DENIED: "bad", D.REFUSED: "bad", D.REJECTED: "bad", D.FAILED: "bad", D.INVALID: "bad",
        D.NOT_FOUND: "bad", D.CONFIRMATION_REQUIRED: "wait", D.EDITED: "wait", D.RESPONDED: "wait"}


def words(code: str) -> str:
    """A result code as words: "ORDER_NOT_CANCELLABLE" -> "Order not cancellable"; "" stays ""."""
    text = code.replace("_", " ").strip().lower()
    return text[:1].upper() + text[1:]


def _url(name: str, ident) -> str:
    try:
        return reverse(name, args=[ident])
    except NoReverseMatch:  # a page another part of the product serves, absent from this build
        return ""


@dataclass(frozen=True)
class Link:
    """A link of a row: label (words), href, and the id it names (shown shortened)."""

    label: str
    href: str
    ident: str


@dataclass(frozen=True)
class TrailRow:
    """One row as the page shows it."""

    event: AuditEvent
    who: str
    what: str
    decision: str
    tone: str
    outcome: str
    comment: str
    detail: str
    links: tuple[Link, ...]


def trail_row(event: AuditEvent) -> TrailRow:
    """The page's view of `event` (its actor loaded with select_related)."""
    _, message = recorded_event_shown(event.masked_arguments, event.message)
    message = mask_text(message)
    commented = event.decision in COMMENTED and event.actor_id is not None
    links = []
    if event.confirmation_id:
        links.append(Link("Request / 申请", _url("approvals:detail", event.confirmation_id), str(event.confirmation_id)))
    if event.run_id:
        links.append(Link("Run / 运行", _url("auditor:run", event.run_id), str(event.run_id)))
    if event.conversation_id:
        links.append(Link("Conversation / 对话", _url("auditor:conversation", event.conversation_id),
                          str(event.conversation_id)))
    who = event.actor.get_username() if event.actor_id else "system / 系统"
    return TrailRow(
        event=event, who=who, what=tool_label(event.tool_name) if event.tool_name else "",
        decision=DECISION_WORDS.get(event.decision, words(event.decision)), tone=TONE.get(event.decision, ""),
        outcome=words(event.status), comment=message if commented else "",
        detail="" if commented or message in ("OK", "") else message, links=tuple(links))
