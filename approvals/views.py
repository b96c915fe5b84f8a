"""The approver dashboard (`/approvals/`) and My requests: server-rendered pages over
`approvals.selectors`. Another tenant's or an unknown request answers 404. The forms on these
pages post to approvals.decision_views.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import requester_selectors, selectors
from approvals.cards import argument_items, present, request_id_or_404
from approvals.forms import ApproveForm, RejectForm
from approvals.presentation import decider

HISTORY_PAGE_SIZE = 25


@login_required
@require_GET
def pending(request: HttpRequest) -> HttpResponse:
    """The requests the signed-in user may decide now, newest first."""
    rows = [present(r, user=request.user) for r in selectors.requests_decidable_by(user=request.user)]
    return render(request, "approvals/dashboard.html", {
        "tab": "pending", "rows": rows, "approve_form": ApproveForm(), "reject_form": RejectForm(),
        "pending_count": len(rows),
    })


@login_required
@require_GET
def history(request: HttpRequest) -> HttpResponse:
    """Decided and expired requests the user could see on the pending tab, newest first (paged)."""
    page = Paginator(selectors.requests_history_for(user=request.user), HISTORY_PAGE_SIZE).get_page(
        request.GET.get("page"))
    rows = [present(r, user=request.user) for r in page.object_list]
    return render(request, "approvals/dashboard.html", {
        "tab": "history", "rows": rows, "page": page,
        "pending_count": selectors.requests_decidable_by(user=request.user).count(),
    })


@login_required
@require_GET
def detail(request: HttpRequest, request_id: str) -> HttpResponse:
    """One request, where a notification's link leads: on the pending tab (with the decision
    forms) while the user may decide it, else as history. 404 for a request the user could not
    see on either tab (unknown, another tenant's, a tool they may not approve)."""
    rid = request_id_or_404(request_id)
    row = selectors.requests_decidable_by(user=request.user).filter(pk=rid).first()
    tab = "pending"
    if row is None:
        row, tab = selectors.requests_history_for(user=request.user).filter(pk=rid).first(), "history"
    if row is None:
        raise Http404("unknown confirmation request")
    return render(request, "approvals/dashboard.html", {
        "tab": tab, "rows": [present(row, user=request.user)], "approve_form": ApproveForm(),
        "reject_form": RejectForm(), "pending_count": selectors.count_decidable_by(user=request.user),
        "single": True,
    })


LIVE_MAX_IDS = 100  # cards one poll may ask about


@login_required
@require_GET
def live(request: HttpRequest) -> JsonResponse:
    """The dashboard's poll (docs/notifications.md, "Live dashboard"): what changed since the page
    was drawn, so it updates without a reload.

    `?count=1`: only "pending_count" (other pages' navigation). `?ids=<uuid>,<uuid>...`: the cards on the page (at most LIVE_MAX_IDS; others ignored).
    Answers {"pending_count": int, "pending": [{"id", "approvals", "quorum", "expires_at"}] (every
    request the user may decide now, newest first), "ended": [{"id", "outcome", "label",
    "decided_by"}] (asked-about cards that no longer wait for this user: decided by someone,
    approved by the user, expired), "poll_seconds": int}. Scoped like the tabs: ids of another
    tenant or of tools the user may not approve are simply absent.
    """
    if request.GET.get("count"):  # the navigation's poll on other pages: the count only
        return JsonResponse({"pending_count": selectors.count_decidable_by(user=request.user), "pending": [],
                             "ended": [], "poll_seconds": settings.APPROVALS_POLL_SECONDS})
    asked = []
    for value in request.GET.get("ids", "").split(",")[:LIVE_MAX_IDS]:
        try:
            asked.append(uuid.UUID(value.strip()))
        except ValueError:
            continue
    pending = list(selectors.requests_decidable_by(user=request.user))
    pending_ids = {row.pk for row in pending}
    ended = []
    rest = [rid for rid in asked if rid not in pending_ids]
    if rest:
        for row in selectors.requests_history_for(user=request.user).filter(pk__in=rest).select_related("decided_by"):
            outcome = selectors.outcome_of(row)
            ended.append({"id": str(row.pk), "outcome": outcome["outcome"], "label": outcome["label"],
                          "decided_by": row.decided_by.get_username() if row.decided_by_id else None,
                          "decided_by_me": bool(row.decided_by_me)})
    return JsonResponse({
        "pending_count": len(pending),
        "pending": [{"id": str(r.pk), "approvals": r.approvals_count, "quorum": r.quorum,
                     "expires_at": r.expires_at.isoformat()} for r in pending],
        "ended": ended,
        "poll_seconds": settings.APPROVALS_POLL_SECONDS,
    })


@login_required
@require_GET
def mine(request: HttpRequest) -> HttpResponse:
    """My requests: every gated call I made, newest first, with who decided what,
    their comments and edits, the expiry, and Withdraw while pending."""
    page = Paginator(requester_selectors.requests_of(user=request.user), HISTORY_PAGE_SIZE).get_page(
        request.GET.get("page"))
    rows = []
    regates = requester_selectors.regates_of(tenant_id=request.user.tenant_id,
                                             request_ids=[r.pk for r in page.object_list])
    for row in page.object_list:
        row.regated = regates.get(row.pk)  # sent back to approvers under a stricter policy, and why
        row.decisions = list(row.approvals.all())
        row.outcome = selectors.outcome_of(row)
        row.decider = decider(row)
        row.argument_items = argument_items(row.masked_arguments)
        row.can_withdraw = row.outcome["outcome"] == "PENDING"
        row.shortfall = selectors.quorum_shortfall(row) if row.can_withdraw else 0
        rows.append(row)
    return render(request, "approvals/my_requests.html", {"rows": rows, "page": page})
