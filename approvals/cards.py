"""The approver dashboard's cards: how one confirmation request is shown (its facts, the arguments
and which of them an approver may edit, the decisions, the real outcome, who counts toward the
quorum), for the pages of approvals.views and approvals.decision_views.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from django.http import Http404

from approvals import eligibility, selectors
from approvals.models import ConfirmationRequest
from approvals.presentation import fact_rows


def edit_value(value: Any) -> str:
    """How an argument is shown in the edit form: masked text as is, None as "", other JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def argument_items(arguments: Any, *, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
    """Masked arguments as (name, text) pairs for display; non-strings are shown as JSON, an
    omitted optional argument as "not given". `exclude`: free text shown apart (written by the
    assistant)."""
    if not isinstance(arguments, dict):
        return [("", json.dumps(arguments, ensure_ascii=False))]
    return [(str(k), v if isinstance(v, str) else "— not given / 未填写" if v is None
             else json.dumps(v, ensure_ascii=False))
            for k, v in arguments.items() if k not in exclude]


def present(row: ConfirmationRequest, *, user) -> ConfirmationRequest:
    """Attach display fields: facts (approval_facts), fact_rows, assistant_texts, argument_items,
    decisions, my_decision, outcome and display_status (the real outcome, selectors.outcome_of),
    eligibility (eligibility.approver_eligibility, for a PENDING request; else None)."""
    row.facts = selectors.approval_facts(row, live=row.status == ConfirmationRequest.Status.PENDING)
    row.fact_rows = fact_rows(row.facts)
    row.assistant_texts = row.facts["written_by_assistant"]
    row.argument_items = argument_items(row.masked_arguments, exclude={t["field"] for t in row.assistant_texts})
    # Only what the tool lets an approver change is offered for editing (the service refuses the
    # rest anyway: EDIT_NOT_ALLOWED); a lowered-only amount shows the requester's as its limit.
    shown = row.masked_arguments if isinstance(row.masked_arguments, dict) else {}
    row.edit_items = [{"name": r["field"], "value": edit_value(shown.get(r["field"])), "rule": r["rule"],
                       "limit": r["limit"]} for r in selectors.edit_rules_of(row)] \
        if row.status == ConfirmationRequest.Status.PENDING else []
    row.decisions = list(row.approvals.all())
    row.my_decision = next((a for a in row.decisions if a.approver_id == user.pk and a.revision == row.revision),
                           None)
    # Only an undecided request expires (docs/decisions.md); a confirmed one runs when its turn
    # settles; a consumed one is EXECUTED only when it succeeded.
    row.outcome = selectors.outcome_of(row)
    row.display_status = row.outcome["label"]
    # Who counts toward the quorum and why the others do not (docs/approvals.md, "Eligibility"):
    # shown while the request can still be decided.
    row.eligibility = eligibility.approver_eligibility(row) if row.outcome["outcome"] == "PENDING" else None
    return row


def request_id_or_404(value: str) -> uuid.UUID:
    """`value` as a request id; Http404 when it is not a UUID (as for an unknown request)."""
    try:
        return uuid.UUID(str(value))
    except ValueError as exc:
        raise Http404("unknown confirmation request") from exc


def display_name(user) -> str:
    """How a person is named on the pages: their full name, else their username."""
    return (user.get_full_name() or "").strip() or user.get_username()


def amount_text(row: ConfirmationRequest) -> str:
    """The amount a request moves, as people read it ("CNY 30.00"): the facts' refund amount when
    the tool states one, else the `amount` argument (with its `currency` when given); "" for none."""
    facts = (row.approval_context or {}).get("facts") or {}
    shown = facts.get("refund_amount")
    if isinstance(shown, dict) and shown.get("display"):
        return str(shown["display"])
    args = row.masked_arguments if isinstance(row.masked_arguments, dict) else {}
    if args.get("amount") in (None, ""):
        return ""
    return " ".join(str(part) for part in (args.get("currency") or facts.get("currency") or "", args["amount"]) if part)


def summarize(row: ConfirmationRequest, *, user, claim=None) -> ConfirmationRequest:
    """Attach what one line of the inbox shows, without a query per row (the decisions are
    prefetched by approvals.selectors.annotated): outcome, display_status, decisions, my_decision,
    amount, requester_name, live_claim (a live RequestClaim or None) and claim_name."""
    row.outcome = selectors.outcome_of(row)
    row.display_status = row.outcome["label"]
    row.decisions = list(row.approvals.all())
    row.my_decision = next((a for a in row.decisions if a.approver_id == user.pk and a.revision == row.revision),
                           None)
    row.amount = amount_text(row)
    row.requester_name = display_name(row.user)
    row.live_claim = claim
    row.claim_name = display_name(claim.user) if claim is not None else ""
    return row
