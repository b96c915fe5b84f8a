"""The approver's inbox (`/approvals/`), a request's own page, the claim buttons and My requests:
server-rendered pages over `approvals.selectors`, `approvals.inbox` and `approvals.claims`.
Another tenant's or an unknown request answers 404. The decision forms post to
approvals.decision_views.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET, require_POST

from agentplatform.tenancy.roles import is_auditor
from core.errors import DomainError, NotFoundError
from core.paging import CappedCountPaginator
from approvals import claims, eligibility, inbox, independence, requester_selectors, selectors
from approvals.cards import amount_text, argument_items, display_name, present, request_id_or_404, summarize
from approvals.forms import ApproveForm, RejectForm
from approvals.models import ConfirmationRequest
from approvals.presentation import decider
from approvals.via import attach_via

HISTORY_PAGE_SIZE = 25


def _conversation_url(row: ConfirmationRequest, *, user) -> str:
    """Where the request's conversation reads: the requester's own chat for the requester; the
    auditor's transcript for anyone else, when that page exists; "" otherwise."""
    if row.user_id == user.pk:
        return f"{reverse('chat')}?c={row.conversation_id}"
    try:
        return reverse("auditor:conversation", args=[row.conversation_id])
    except NoReverseMatch:
        return ""


def _pane(row: ConfirmationRequest, *, user, decidable: bool, read_only: bool = False,
          take: bool = True) -> ConfirmationRequest:
    """The detail pane of `row`: its card (approvals.cards.present), its live claim, the links,
    whether its decision forms are shown. Opening it as a decider claims it (unless `take` is
    False: just released); an approver's opening is recorded (approvals.claims.view_record); an
    auditor's read-only view does neither."""
    present(row, user=user)
    if decidable and take:
        claims.claim_take(request_id=row.pk, user=user)
    if not read_only:
        claims.view_record(request=row, user=user)
    claim = claims.claims_on(request_ids=[row.pk], tenant_id=row.tenant_id).get(row.pk)
    row.live_claim = claim
    row.claim_name = display_name(claim.user) if claim is not None else ""
    row.decidable = decidable and not read_only
    row.read_only = read_only
    row.requester_name = display_name(row.user)
    row.amount = amount_text(row)
    row.conversation_url = _conversation_url(row, user=user)
    attach_via([row], tenant_id=row.tenant_id)
    return row


def _visible(user, rid) -> tuple[ConfirmationRequest | None, bool]:
    """(the request `rid` as one of the inbox's tabs shows it to `user`, whether they may decide
    it now); (None, False) when no tab shows it to them."""
    row = selectors.requests_decidable_by(user=user).filter(pk=rid).first()
    if row is not None:
        return row, True
    row = selectors.requests_history_for(user=user).filter(pk=rid).first() or inbox.open_for(
        user=user).filter(pk=rid).first()
    return row, False


def _inbox(request: HttpRequest, *, default_tab: str) -> HttpResponse:
    """The inbox page (see `pending`); `rows_only=1` draws the list without a pane (the live
    poll's copy, which must neither claim nor record an opening)."""
    query = inbox.parse(request.GET, default_tab=default_tab)
    user = request.user
    page = inbox.page_of(inbox.narrowed(inbox.tab_rows(user=user, tab=query.tab), query), query.page)
    rows = attach_via([summarize(r, user=user, claim=inbox.live_claim(r)) for r in page.rows],
                      tenant_id=user.tenant_id)
    for row in rows:
        row.conversation_url = _conversation_url(row, user=user)
    chosen, decidable = None, False
    wanted = None if request.GET.get("rows_only") else request.GET.get("open")
    if wanted:
        chosen, decidable = _visible(user, request_id_or_404(wanted))
        if chosen is None:
            raise Http404("unknown confirmation request")
    elif query.tab == "mine" and rows and not request.GET.get("rows_only"):
        # Open the first request nobody else is looking at: two approvers landing together split the work.
        first = next((r for r in rows if r.live_claim is None or r.live_claim.user_id == user.pk), rows[0])
        chosen, decidable = selectors.requests_decidable_by(user=user).filter(pk=first.pk).first(), True
    pane = _pane(chosen, user=user, decidable=decidable, take=not request.GET.get("released")) \
        if chosen is not None else None
    if pane is not None and pane.live_claim is not None:  # the line shows the claim just taken
        for row in rows:
            if row.pk == pane.pk:
                row.live_claim, row.claim_name = pane.live_claim, pane.claim_name
    keep = request.GET.copy()
    for key in ("open", "page", "released"):
        keep.pop(key, None)
    if query.tab == "mine" and not query.filtered() and not page.count_capped:
        # The unfiltered "waiting for me" tab is what the badge counts, by the same rules: its
        # count is the badge's, and the waiting rows are not counted a second time.
        request.approvals_pending_count = page.count
    else:
        request.approvals_pending_count = selectors.count_decidable_by(user=user)  # the menu's badge reuses it
    return render(request, "approvals/inbox.html", {
        "tab": query.tab, "query": query, "page": page, "rows": rows, "pane": pane,
        "pending_count": request.approvals_pending_count, "keep": keep.urlencode(),
        "tools": selectors.approvable_tools(user).order_by("name").values_list("name", flat=True),
        "risks": inbox.RISKS, "approve_form": ApproveForm(), "reject_form": RejectForm(),
    })


@login_required
@require_GET
@independence.shared_standing()  # eligibility and shortfalls of many rows: the standing read once
def pending(request: HttpRequest) -> HttpResponse:
    """The inbox: one line per request of the tab asked for (`?tab=mine|open|decided`, default
    mine), filtered (`tool`, `risk`, `requester`, `amount_min`, `amount_max`), searched (`q`),
    sorted (`sort=newest|expires`), paged (`page`), with one request's detail pane (`open=<id>`,
    else the first on "mine" that nobody else is looking at)."""
    return _inbox(request, default_tab="mine")


@login_required
@require_GET
@independence.shared_standing()  # eligibility and shortfalls of many rows: the standing read once
def history(request: HttpRequest) -> HttpResponse:
    """The inbox's "decided" tab (decided and expired requests the user could see), newest first."""
    return _inbox(request, default_tab="decided")


@login_required
@require_GET
@independence.shared_standing()  # eligibility and shortfalls of many rows: the standing read once
def detail(request: HttpRequest, request_id: str) -> HttpResponse:
    """One request's page, where a notification's link leads: with the decision forms (and a claim)
    while the user may decide it; as history once they can no longer; read-only (no forms, no
    claim) for an auditor of its tenant. 404 for anyone else, another tenant's or an unknown id."""
    rid = request_id_or_404(request_id)
    user = request.user
    row, decidable = _visible(user, rid)
    if not decidable and requester_selectors.request_of(user=user, request_id=rid) is not None:
        return redirect("approvals:mine-detail", request_id=rid)  # the requester's own page
    read_only = False
    if row is None and is_auditor(user) and user.tenant_id is not None:
        row = selectors.annotated(ConfirmationRequest.objects.filter(pk=rid, tenant_id=user.tenant_id), user).first()
        read_only = True
    if row is None:
        raise Http404("unknown confirmation request")
    request.approvals_pending_count = selectors.count_decidable_by(user=user)  # the menu's badge reuses it
    return render(request, "approvals/detail.html", {
        "pane": _pane(row, user=user, decidable=decidable, read_only=read_only),
        "pending_count": request.approvals_pending_count,
    })


LIVE_MAX_IDS = 100  # cards one poll may ask about


@login_required
@require_GET
@independence.shared_standing()  # eligibility and shortfalls of many rows: the standing read once
def live(request: HttpRequest) -> JsonResponse:
    """The dashboard's poll (docs/notifications.md, "Live dashboard"): what changed since the page
    was drawn, so it updates without a reload.

    `?count=1`: only "pending_count" (other pages' navigation). `?ids=<uuid>,<uuid>...`: the cards on the page (at most LIVE_MAX_IDS; others ignored).
    Answers {"pending_count": int, "pending": [{"id", "approvals", "quorum", "expires_at",
    "claimed_by" (who is looking at it: a display name, or null), "claimed_by_me"}] (the newest
    LIVE_MAX_IDS requests the user may decide now), "ended": [{"id", "outcome", "label",
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
    # The newest LIVE_MAX_IDS requests waiting (the page shows at most a page of them), plus the count.
    pending = list(selectors.requests_decidable_by(user=request.user)[:LIVE_MAX_IDS])
    claimed = claims.claims_on(request_ids=[r.pk for r in pending], tenant_id=request.user.tenant_id)
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
        "pending_count": selectors.count_decidable_by(user=request.user),
        "pending": [{"id": str(r.pk), "approvals": r.approvals_count, "quorum": r.quorum,
                     "expires_at": r.expires_at.isoformat(),
                     "claimed_by": display_name(claimed[r.pk].user) if r.pk in claimed else None,
                     "claimed_by_me": r.pk in claimed and claimed[r.pk].user_id == request.user.pk}
                    for r in pending],
        "ended": ended,
        "poll_seconds": settings.APPROVALS_POLL_SECONDS,
    })


@login_required
@require_GET
@independence.shared_standing()  # eligibility and shortfalls of many rows: the standing read once
def mine(request: HttpRequest) -> HttpResponse:
    """My requests: every gated call I made, newest first, with who decided what,
    their comments and edits, the expiry, and Withdraw while pending."""
    # The count reads at most COUNT_CAP rows; past it the pager says "of more than N" (core.paging).
    page = CappedCountPaginator(requester_selectors.requests_of(user=request.user), HISTORY_PAGE_SIZE).get_page(
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
        row.shortfall = eligibility.quorum_shortfall(row) if row.can_withdraw else 0
        rows.append(row)
    attach_via(rows, tenant_id=request.user.tenant_id)
    return render(request, "approvals/my_requests.html", {"rows": rows, "page": page})


@login_required
@require_POST
def claim(request: HttpRequest, request_id: str) -> HttpResponse:
    """The Claim button: reserve the request for the signed-in approver (approvals.claims), then
    back to it in the inbox. A refusal becomes a message; another tenant's request answers 404."""
    rid = request_id_or_404(request_id)
    try:
        claims.claim_take(request_id=rid, user=request.user)
    except DomainError as error:
        if isinstance(error, NotFoundError):
            raise Http404(error.message) from error
        messages.error(request, error.message, extra_tags=error.code)
        return redirect("approvals:pending")
    return redirect(f"{reverse('approvals:pending')}?open={rid}")


@login_required
@require_POST
def release(request: HttpRequest, request_id: str) -> HttpResponse:
    """The Release button: drop my claim on the request; back to the inbox."""
    rid = request_id_or_404(request_id)
    try:
        claims.claim_release(request_id=rid, user=request.user)
    except NotFoundError as error:
        raise Http404(error.message) from error
    messages.success(request, "Released: others see it as free. / 已释放。")
    return redirect(f"{reverse('approvals:pending')}?open={rid}&released=1")  # open, not claimed again
