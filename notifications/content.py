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
from approvals import eligibility, selectors
from approvals.models import ConfirmationRequest
from approvals.presentation import fact_rows
from notifications import wording
from tools.display import tool_label

REQUESTED = "approval.requested"
DECIDED = "approval.decided"
REVISED = "approval.revised"
RETRACTED = "approval.retracted"
EVENTS = (REQUESTED, DECIDED, REVISED, RETRACTED)


def approver_link(request: ConfirmationRequest) -> str:
    """Absolute URL of the request's page (approvals:detail) under PLATFORM_BASE_URL."""
    return settings.PLATFORM_BASE_URL + reverse("approvals:detail", args=[request.pk])


def requester_link(request: ConfirmationRequest) -> str:
    """Absolute URL of the requester's conversation, where the request's card is, under
    PLATFORM_BASE_URL."""
    return f"{settings.PLATFORM_BASE_URL}{reverse('chat')}?c={request.conversation_id}"


def request_document(request: ConfirmationRequest, *, event: str, message_id: uuid.UUID | None = None,
                     extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The webhook body of `event` (one of EVENTS) about `request`, masked; also what the emails
    are written from.

    Shape: {"id": message uuid, "event", "occurred_at": ISO, "tenant": slug, "request": {"id",
    "url" (the request's page), "requester_url" (the conversation), "tool" (wire name),
    "tool_label" (what people read), "summary", "risk", "risk_label", "quorum", "approvals"
    (decisions counted towards the quorum: APPROVE and EDIT on the current revision), "revision",
    "status", "outcome", "outcome_label", "requester", "requester_name", "decided_by",
    "decided_by_name", "reason", "created_at", "expires_at", "facts": [{"name", "label", "value",
    "changed", "was"}], "written_by_assistant": [{"field", "text", "truncated"}]}, "text": plain
    words ready for a chat message}, plus the keys of `extra` (e.g. "changes", "ending").
    """
    facts = selectors.approval_facts(request, live=request.status == ConfirmationRequest.Status.PENDING)
    outcome = selectors.outcome_of(request)
    approvals = eligibility.approvals_counted(request)  # the current revision's, as the quorum counts them
    decider = request.decided_by if request.decided_by_id else None
    body = {
        "id": str(message_id or uuid.uuid4()),
        "event": event,
        "occurred_at": clock.now().isoformat(),
        "tenant": request.tenant.slug,
        "request": {
            "id": str(request.pk), "url": approver_link(request), "requester_url": requester_link(request),
            "tool": request.tool_name, "tool_label": tool_label(request.tool_name), "summary": request.summary,
            "risk": request.risk, "risk_label": wording.risk_words(request.risk), "quorum": request.quorum,
            "approvals": approvals, "revision": request.revision, "status": request.status,
            "outcome": outcome["outcome"], "outcome_label": outcome["label"],
            "requester": request.user.get_username(), "requester_name": wording.display_name(request.user),
            "decided_by": decider.get_username() if decider else None, "decided_by_name": wording.display_name(decider),
            "reason": request.decision_reason if event in (DECIDED, RETRACTED) else "",
            "created_at": request.created_at.isoformat(), "expires_at": request.expires_at.isoformat(),
            "facts": fact_rows(facts),
            "written_by_assistant": [{"field": t["field"], "text": t["text"], "truncated": t["truncated"]}
                                     for t in facts["written_by_assistant"]],
        },
        **(extra or {}),
    }
    body["text"] = _chat_text(body)
    return mask_json(body)


def _chat_text(body: dict[str, Any]) -> str:
    """One paragraph of plain words for a chat relay (no codes), the link last."""
    r = body["request"]
    if body["event"] == REQUESTED:
        head = (f"Approval needed / 待审批 ({r['risk_label']}, {r['approvals']} of {r['quorum']}): {r['summary']} "
                f"({r['tool_label']}), requested by {r['requester_name']}, expires {r['expires_at'][:16]} UTC")
    elif body["event"] == REVISED:
        head = f"Edited, approval needed again / 已修改，需重新审批: {r['summary']} ({r['tool_label']})"
    elif body["event"] == RETRACTED:
        why = wording.no_longer_needed(ending=body.get("ending", ""), outcome=r["outcome"],
                                       decided_by=r["decided_by_name"])
        head = f"No longer needs a decision / 无需再审批: {r['summary']}: {why[0]} / {why[1]}"
    else:
        word = wording.outcome_words(r["outcome"])[1]
        who = f" by {r['decided_by_name']}" if r["decided_by_name"] else ""
        head = f"Request {word}{who}: {r['summary']} ({r['tool_label']})"
    return f"{head}\n{r['url']}"


def fact_lines(body: dict[str, Any]) -> list[str]:
    """The facts and the assistant's quoted words of `body`, as lines of an email."""
    r = body["request"]
    lines = []
    if r["facts"]:
        lines += ["", "Facts / 业务信息:"]
        for fact in r["facts"]:
            changed = f"  (changed since request, was {fact['was']} / 已变化)" if fact["changed"] else ""
            lines.append(f"  {fact['label']}: {fact['value']}{changed}")
    for text in r["written_by_assistant"]:
        cut = " [cut / 已截断]" if text["truncated"] else ""
        lines += ["", "Written by the assistant, not checked by the platform / 由助手撰写，平台未核实 "
                      f"({wording.argument_label(text['field'])}):",
                  f"  \u201c{text['text']}\u201d{cut}"]
    return lines


def requester_email(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, text) of the email telling the requester how their request was decided: plain
    words, display names, the conversation's link."""
    r = body["request"]
    verdict, word = wording.outcome_words(r["outcome"])
    subject = f"[agentplatform] Your request / 您的请求: {word} \u2014 {r['summary']}"[:200]
    lines = [f"Your request / 您的请求: {r['summary']}", f"Tool / 工具: {r['tool_label']}",
             f"Result / 结果: {verdict}"]
    if r["decided_by_name"]:
        lines.append(f"Decided by / 决定人: {r['decided_by_name']}")
    if r["reason"] and r["outcome"] in ("REJECTED", "CANCELLED"):  # CANCELLED: the tool was stopped
        lines.append(f"Reason / 原因: {r['reason']}")
    lines += [f"Approvals / 批准: {r['approvals']} of {r['quorum']} / 共需 {r['quorum']} 位，已有 {r['approvals']} 位",
              "", f"Conversation / 查看对话: {r['requester_url']}"]
    return subject, "\n".join(lines) + "\n"
