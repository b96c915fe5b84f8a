"""The requester's page of one of their gated calls (`/approvals/mine/<id>/`), where an agent's
"pending" answer (an MCP call's `url`) leads: the call as approvers see it, where it stands, and
the requester's own decisions (Confirm / Cancel a call that waits for them; Withdraw one that
waits for approvers). Only the requester sees it: anyone else, another tenant's or an unknown id
answers 404. Decisions are POST forms (CSRF); the server finds the request by id and owner, so no
confirmation token ever reaches the page.
"""
from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from core.errors import DomainError, NotFoundError
from approvals import eligibility, requester_actions, requester_selectors
from approvals.cards import present
from approvals.models import ConfirmationRequest
from approvals.presentation import decider
from approvals.via import attach_via

Policy = ConfirmationRequest.Policy

# Where the request stands, in the requester's words (selectors.outcome_of's outcome -> English / 中文).
STANDING = {
    "CONFIRMED": "Approved: it runs when its turn comes (a call made over MCP runs when your agent asks for it "
                 "again). / 已批准：轮到时执行（通过 MCP 发起的调用在您的代理再次请求时执行）。",
    "EXECUTED": "It ran. / 已执行。",
    "FAILED": "It ran, and the business refused it. / 已执行，但业务拒绝了该操作。",
    "REFUSED": "Approved, but refused when it was about to run (the rules in force then did not allow it); "
               "nothing ran. / 已批准，但执行时被拒绝（当时生效的规则不允许），未执行任何操作。",
    "REJECTED": "Rejected; nothing ran. / 已拒绝，未执行。",
    "CANCELLED": "Cancelled with its run or its tool; nothing ran. / 已随运行或工具停用而取消，未执行。",
    "EXPIRED": "Expired before anyone decided; nothing ran. / 已过期，未执行。",
    "WITHDRAWN": "You withdrew it; nothing ran. / 您已撤回，未执行。",
    "SUPERSEDED": "Replaced by a newer request for the same action; nothing ran. / 已被同一操作的新请求取代，未执行。",
    "RESPONDED": "An approver answered with guidance instead; nothing ran. / 审批人给出了指导意见，未执行。",
}

# What a refused decision reads as on this page (stable code -> English / 中文): a double submit or
# a page opened before someone else decided changes nothing a second time.
REFUSED = {
    "ALREADY_DECIDED": "This request was already decided; nothing was done again. / 该请求已被处理，未重复执行任何操作。",
    "CONFIRMATION_EXPIRED": "This request expired before your decision; nothing was done. / 该请求已过期，未执行任何操作。",
}


def _standing(row: ConfirmationRequest) -> str:
    """The sentence saying where `row` stands for its requester (see STANDING)."""
    outcome = row.outcome["outcome"]
    if outcome == "PENDING":
        if row.policy == Policy.REQUESTER:
            return "Waiting for your confirmation. / 等待您的确认。"
        return (f"Waiting for approvers: {row.approvals_count} of {row.quorum} approval(s) so far. "
                f"/ 等待审批人：已批准 {row.approvals_count} / {row.quorum}。")
    if outcome == "REJECTED" and row.decided_by_id == row.user_id:
        return "You cancelled it; nothing ran. / 您已取消，未执行。"
    return STANDING.get(outcome, outcome)


def _owned_or_404(request: HttpRequest, request_id: uuid.UUID) -> ConfirmationRequest:
    row = requester_selectors.request_of(user=request.user, request_id=request_id)
    if row is None:
        raise Http404("unknown confirmation request")
    return row


@login_required
@require_GET
def mine_detail(request: HttpRequest, request_id: uuid.UUID) -> HttpResponse:
    """The requester's page of their request `request_id`: tool title, the call as approvers see it
    (approvals/_pane_body.html), where it stands, the expiry, who decided, the via-MCP mark, and the
    requester's decision forms while it is open. 404 for anyone but the requester."""
    row = _owned_or_404(request, request_id)
    present(row, user=request.user)
    row.eligibility = None  # who may approve is the tenant's business, not the requester's
    attach_via([row], tenant_id=row.tenant_id)
    row.standing = _standing(row)
    row.decider = decider(row)
    pending = row.outcome["outcome"] == "PENDING"
    row.waits_on_me = pending and row.policy == Policy.REQUESTER
    row.can_withdraw = pending and row.policy == Policy.APPROVERS
    row.shortfall = eligibility.quorum_shortfall(row) if row.can_withdraw else 0
    regates = requester_selectors.regates_of(tenant_id=row.tenant_id, request_ids=[row.pk])
    row.regated = regates.get(row.pk)
    return render(request, "approvals/mine_detail.html", {"pane": row})


def _decide(request: HttpRequest, request_id: uuid.UUID, *, cancel: bool) -> HttpResponse:
    decide = requester_actions.confirmation_cancel_own if cancel else requester_actions.confirmation_confirm_own
    try:
        decided = decide(request_id=request_id, user=request.user)
    except DomainError as error:
        if isinstance(error, NotFoundError):
            raise Http404(error.message) from error
        messages.error(request, REFUSED.get(error.code, error.message), extra_tags=error.code)
        return redirect("approvals:mine-detail", request_id=request_id)
    if cancel:
        messages.success(request, f"Cancelled; nothing will run. / 已取消，不会执行。 — {decided.summary}")
    else:
        messages.success(request, f"Confirmed. / 已确认。 — {decided.summary}")
    return redirect("approvals:mine-detail", request_id=request_id)


@login_required
@require_POST
def mine_confirm(request: HttpRequest, request_id: uuid.UUID) -> HttpResponse:
    """Confirm / 确认: the requester confirms their own call that waits for them
    (requester_actions.confirmation_confirm_own; its run resumes after commit), then back to the
    page. Already decided or expired: a message, nothing done again. 404 for anyone else."""
    return _decide(request, request_id, cancel=False)


@login_required
@require_POST
def mine_cancel(request: HttpRequest, request_id: uuid.UUID) -> HttpResponse:
    """Cancel / 取消: the requester declines their own call that waits for them (nothing runs),
    then back to the page. Same refusals as `mine_confirm`."""
    return _decide(request, request_id, cancel=True)
