"""What a notification says: one JSON document per event (the webhook body) and the emails built
from it. Everything comes from the stored request, already masked (summary, arguments, facts),
and the whole document goes through `mask_json` once more: no token, secret or unmasked personal
data leaves this way.

The facts are the approval context the dashboard shows (approvals.selectors.approval_facts and
approvals.presentation.fact_rows, docs/approvals.md); the assistant's own words are labelled as
such, never presented as the platform's.
"""
from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.urls import reverse

from core import clock
from core.redaction.text import mask_json
from approvals import selectors
from approvals.models import ConfirmationRequest
from approvals.presentation import fact_rows

REQUESTED = "approval.requested"
DECIDED = "approval.decided"
EVENTS = (REQUESTED, DECIDED)


def approver_link(request: ConfirmationRequest) -> str:
    """Absolute URL of the request on the approver dashboard (approvals:detail)."""
    return settings.PLATFORM_BASE_URL + reverse("approvals:detail", args=[request.pk])


def requester_link(request: ConfirmationRequest) -> str:
    """Absolute URL of the requester's conversation, where the request's card is."""
    return f"{settings.PLATFORM_BASE_URL}{reverse('chat')}?c={request.conversation_id}"


def request_document(request: ConfirmationRequest, *, event: str, message_id: uuid.UUID | None = None) -> dict[str, Any]:
    """The webhook body of `event` (REQUESTED or DECIDED) about `request`, masked.

    Shape: {"id": message uuid, "event", "occurred_at": ISO, "tenant": slug, "request": {"id",
    "url" (approver dashboard), "requester_url" (the conversation), "tool", "summary", "risk",
    "quorum", "approvals" (decisions counted towards the quorum: APPROVE and EDIT on the current revision), "status", "outcome", "outcome_label",
    "requester", "decided_by", "reason", "created_at", "expires_at", "facts": [{"name", "label",
    "value", "changed", "was"}], "written_by_assistant": [{"field", "text", "truncated"}]},
    "text": plain text ready for a chat message}.
    """
    facts = selectors.approval_facts(request, live=request.status == ConfirmationRequest.Status.PENDING)
    outcome = selectors.outcome_of(request)
    approvals = selectors.approvals_counted(request)  # the current revision's, as the quorum counts them
    decided_by = request.decided_by.get_username() if request.decided_by_id else None
    body = {
        "id": str(message_id or uuid.uuid4()),
        "event": event,
        "occurred_at": clock.now().isoformat(),
        "tenant": request.tenant.slug,
        "request": {
            "id": str(request.pk), "url": approver_link(request), "requester_url": requester_link(request),
            "tool": request.tool_name, "summary": request.summary, "risk": request.risk, "quorum": request.quorum,
            "approvals": approvals, "status": request.status, "outcome": outcome["outcome"],
            "outcome_label": outcome["label"], "requester": request.user.get_username(), "decided_by": decided_by,
            "reason": request.decision_reason if event == DECIDED else "",
            "created_at": request.created_at.isoformat(), "expires_at": request.expires_at.isoformat(),
            "facts": fact_rows(facts),
            "written_by_assistant": [{"field": t["field"], "text": t["text"], "truncated": t["truncated"]}
                                     for t in facts["written_by_assistant"]],
        },
    }
    body["text"] = _chat_text(body)
    return mask_json(body)


def _chat_text(body: dict[str, Any]) -> str:
    r = body["request"]
    if body["event"] == REQUESTED:
        head = (f"Approval needed ({r['risk']}, {r['approvals']}/{r['quorum']}): {r['summary']} "
                f"requested by {r['requester']}, expires {r['expires_at'][:16]} UTC")
        return f"{head}\n{r['url']}"
    who = f" by {r['decided_by']}" if r["decided_by"] else ""
    return f"Request {r['outcome_label']}{who}: {r['summary']}\n{r['url']}"


def _fact_lines(body: dict[str, Any]) -> list[str]:
    r = body["request"]
    lines = []
    if r["facts"]:
        lines += ["", "Facts / 业务信息:"]
        for fact in r["facts"]:
            changed = f"  (changed since request, was {fact['was']} / 已变化)" if fact["changed"] else ""
            lines.append(f"  {fact['label']}: {fact['value']}{changed}")
    for text in r["written_by_assistant"]:
        cut = " [cut / 已截断]" if text["truncated"] else ""
        lines += ["", f"Written by the assistant, not checked by the platform / 由助手撰写，平台未核实 ({text['field']}):",
                  f"  \u201c{text['text']}\u201d{cut}"]
    return lines


def approver_email(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, text) of the email to an approver who may decide the request of `body`."""
    r = body["request"]
    subject = f"[agentplatform] Approval needed / 待审批: {r['summary']}"[:200]
    lines = [
        "A request waits for your decision. / 有一项请求等待您审批。",
        "",
        f"What: {r['summary']}",
        f"Tool: {r['tool']}  Risk: {r['risk']}  Approvals: {r['approvals']} / {r['quorum']}",
        f"Requested by: {r['requester']}",
        f"Expires: {r['expires_at'][:19]} UTC",
        *_fact_lines(body),
        "",
        f"Decide here / 去审批: {r['url']}",
    ]
    return subject, "\n".join(lines) + "\n"


def requester_email(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, text) of the email telling the requester how their request was decided."""
    r = body["request"]
    verdict = {
        "CONFIRMED": "approved; it runs now / 已批准，即将执行",
        "EXECUTED": "approved and executed / 已批准并执行",
        "REJECTED": "rejected; nothing was done / 已拒绝，未执行",
        "EXPIRED": "expired before anyone decided; nothing was done / 已过期，未执行",
        "CANCELLED": "cancelled; nothing was done / 已取消，未执行",
    }.get(r["outcome"], r["outcome_label"])
    subject = f"[agentplatform] Your request was {r['outcome_label'].lower()} / 审批结果: {r['summary']}"[:200]
    lines = [f"Your request: {r['summary']}", f"Result: {verdict}"]
    if r["decided_by"]:
        lines.append(f"Decided by: {r['decided_by']}")
    if r["reason"] and r["outcome"] in ("REJECTED", "CANCELLED"):  # CANCELLED: the tool was stopped
        lines.append(f"Reason: {r['reason']}")
    lines += [f"Approvals: {r['approvals']} / {r['quorum']}", "", f"Conversation / 查看对话: {r['requester_url']}"]
    return subject, "\n".join(lines) + "\n"
