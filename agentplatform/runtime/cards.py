"""The requester's decision cards, rebuilt from stored state: one per confirmation request of a
conversation (or of one run), with what it asks, what became of it in plain words, who decided and
why, each reviewer's decision and comment, and the arguments that ran (an edit as old → new).

The chat page draws a card from this shape after a reload, and redraws a live card with it once
the run's stream says the call ended, so both read the same (agentplatform.runtime.card_words).
Reads only; scoped to the requester's own requests in their tenant.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Prefetch

from agentplatform.runtime import card_words
from approvals import presentation
from approvals.models import Approval, ConfirmationRequest
from approvals.selectors import outcome_of
from core.redaction.fields import mask_value
from tools.display import tool_label

# Outcomes after which nothing more happens to a card; the rest may still change.
SETTLED_OK = ("EXECUTED",)
OPEN = ("PENDING", "CONFIRMED")


def display_name(user) -> str:
    """How a person is named to others: their full name, else their username ("" for None)."""
    if user is None:
        return ""
    return (user.get_full_name() or "").strip() or user.get_username()


def _currency(request: ConfirmationRequest) -> str:
    facts = (request.approval_context or {}).get("facts") or {}
    if isinstance(facts.get("currency"), str):
        return facts["currency"]
    for value in facts.values():
        if isinstance(value, dict) and isinstance(value.get("currency"), str):
            return value["currency"]
    return ""


def _decider(request: ConfirmationRequest) -> dict[str, str] | None:
    who = presentation.decider(request)
    if who is None:
        return None
    return {"role": who["role"], "name": display_name(request.decided_by)}


def _card(request: ConfirmationRequest) -> dict[str, Any]:
    """The card of one request (approvals and their approvers prefetched, `decided_by` selected)."""
    outcome = outcome_of(request)
    needs = "requester" if request.policy == ConfirmationRequest.Policy.REQUESTER else "approvers"
    decisions = list(request.approvals.all())
    counting = [a for a in decisions if a.revision == request.revision
                and a.decision in (Approval.Decision.APPROVE, Approval.Decision.EDIT)]
    currency = _currency(request)
    edits = [{"by": display_name(a.approver), "comment": mask_value("comment", a.comment),
              "changes": [{"field": c.get("field"), "from": c.get("from"), "to": c.get("to"),
                           "text": card_words.change_text(c, currency)} for c in (a.changes or [])]}
             for a in decisions if a.decision == Approval.Decision.EDIT]
    edited_by = list(dict.fromkeys(e["by"] for e in edits))
    reason = mask_value("reason", request.decision_reason or "")
    decider = _decider(request)
    status = card_words.status_text(
        outcome=outcome["outcome"], code=outcome["code"], needs=needs, decider=decider, reason=reason,
        approvals=len(counting), quorum=request.quorum,
        approvers=list(dict.fromkeys(display_name(a.approver) for a in counting)), edited_by=edited_by)
    state = "pending" if outcome["outcome"] in OPEN else ("ok" if outcome["outcome"] in SETTLED_OK else "failed")
    changes = "; ".join(c["text"] for e in edits for c in e["changes"])
    context = request.approval_context or {}
    return {
        "confirmation_id": request.pk, "run_id": request.run_id, "tool_call_id": request.tool_call_id,
        "tool": request.tool_name, "tool_label": tool_label(request.tool_name),
        "risk": request.risk, "needs": needs, "quorum": request.quorum, "approvals": len(counting),
        "status": request.status, "outcome": outcome["outcome"], "outcome_code": outcome["code"],
        "state": state, "status_text": status,
        "summary": request.summary, "arguments": request.masked_arguments,
        "facts": context.get("facts") or {}, "written_by_assistant": context.get("written_by_assistant") or {},
        "decided_by": decider, "reason": reason,
        "decisions": [{"name": display_name(a.approver), "decision": a.decision,
                       "decision_text": card_words.DECISION_WORDS.get(a.decision, a.decision.lower()),
                       "comment": mask_value("comment", a.comment), "at": a.created_at} for a in decisions],
        "edits": edits,
        "edit_text": (f"Edited by {', '.join(edited_by)} / 修改人: {changes}" if edits else ""),
        "created_at": request.created_at, "expires_at": request.expires_at,
        "decided_at": request.decided_at or request.consumed_at,
    }


def _requests(**where) -> list[ConfirmationRequest]:
    approvals = Prefetch("approvals", queryset=Approval.objects.select_related("approver").order_by("created_at"))
    return list(ConfirmationRequest.objects.filter(**where).select_related("decided_by")
                .prefetch_related(approvals).order_by("created_at"))


def conversation_cards(*, conversation) -> list[dict[str, Any]]:
    """Every decision card of `conversation` (its owner's requests in its tenant), oldest first:
    [{"confirmation_id", "run_id", "tool_call_id", "tool" (wire name), "tool_label", "risk",
    "needs", "quorum", "approvals" (that count now), "status", "outcome", "outcome_code" (codes),
    "state" ("pending" | "ok" | "failed"), "status_text" (words), "summary" (the call as it
    runs or ran), "arguments" (masked, as they run or ran), "facts", "written_by_assistant",
    "decided_by" ({"role", "name"} | None), "reason" (masked), "decisions" ([{"name",
    "decision", "decision_text", "comment", "at"}]), "edits" ([{"by", "comment", "changes":
    [{"field", "from", "to", "text"}]}]), "edit_text", "created_at", "expires_at", "decided_at"}].
    Three queries whatever the number of cards."""
    return [_card(r) for r in _requests(tenant_id=conversation.tenant_id, user_id=conversation.user_id,
                                        conversation_id=conversation.pk)]


def run_cards(*, run) -> list[dict[str, Any]]:
    """The decision cards of one run (shape of conversation_cards), oldest first."""
    return [_card(r) for r in _requests(tenant_id=run.tenant_id, user_id=run.user_id, run_id=run.pk)]
