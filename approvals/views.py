"""The approver dashboard (`/approvals/`): server-rendered pages over `approvals.selectors` and
`approvals.services` (issue 3). Views stay thin: they read through selectors, decide through the
services (which re-check tenant, `approve_tool`, own-request, expiry and state under a row lock),
and turn refusals into Django messages. Another tenant's or an unknown request answers 404.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from agentplatform.errors import DomainError, NotFound
from approvals import amendments, selectors, services
from approvals.forms import ApproveForm, EditForm, RejectForm, RespondForm, WithdrawForm
from approvals.models import Approval, ConfirmationRequest
from approvals.presentation import fact_rows

HISTORY_PAGE_SIZE = 25

# What a person reads when the service refuses a decision (stable code -> bilingual text).
REFUSALS = {
    "CONFIRMATION_EXPIRED": "This request expired before your decision; nothing was done. / 该请求已过期，未执行任何操作。",
    "ALREADY_DECIDED": ("This request was already decided, so your decision was not recorded. "
                        "/ 该请求已被处理，您的决定未被记录。"),
    # The same code for a second decision of the same approver (a double submit, the back button):
    # their first decision was recorded and stands.
    "ALREADY_DECIDED_BY_ME": ("You already decided this request; that decision stands and was not recorded twice. "
                              "/ 您已处理过该请求，之前的决定仍然有效，未重复记录。"),
    "APPROVAL_FORBIDDEN": "You may not decide this request: {message} / 您无权处理该请求。",
    "APPROVER_NOT_INDEPENDENT": "{message} / 您的决定不计入该请求。",
    "INVALID_ARGUMENTS": "{message}",
    "ARGUMENTS_CHANGED": ("Another approver changed the arguments after you opened this request; nothing was "
                          "saved. Read the request again before you decide. / 您打开此请求后，其他审批人修改了参数，"
                          "未保存任何内容，请重新查看后再作决定。"),
    "EDIT_UNCHANGED": "Your edit changes nothing once normalised. / 修改后的参数与当前参数相同。",
    "EDIT_NOT_ALLOWED": "Not saved: {message}",
}


def _edit_value(value: Any) -> str:
    """How an argument is shown in the edit form: masked text as is, None as "", other JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _argument_items(arguments: Any, *, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
    """Masked arguments as (name, text) pairs for display; non-strings are shown as JSON, an
    omitted optional argument as "not given". `exclude`: free text shown apart (written by the
    assistant)."""
    if not isinstance(arguments, dict):
        return [("", json.dumps(arguments, ensure_ascii=False))]
    return [(str(k), v if isinstance(v, str) else "— not given / 未填写" if v is None
             else json.dumps(v, ensure_ascii=False))
            for k, v in arguments.items() if k not in exclude]


def _present(row: ConfirmationRequest, *, user) -> ConfirmationRequest:
    """Attach display fields: facts (approval_facts), fact_rows, assistant_texts, argument_items,
    decisions, my_decision, outcome and display_status (the real outcome, selectors.outcome_of),
    eligibility (selectors.approver_eligibility, for a PENDING request; else None)."""
    row.facts = selectors.approval_facts(row, live=row.status == ConfirmationRequest.Status.PENDING)
    row.fact_rows = fact_rows(row.facts)
    row.assistant_texts = row.facts["written_by_assistant"]
    row.argument_items = _argument_items(row.masked_arguments, exclude={t["field"] for t in row.assistant_texts})
    # Only what the tool lets an approver change is offered for editing (the service refuses the
    # rest anyway: EDIT_NOT_ALLOWED); a lowered-only amount shows the requester's as its limit.
    shown = row.masked_arguments if isinstance(row.masked_arguments, dict) else {}
    row.edit_items = [{"name": r["field"], "value": _edit_value(shown.get(r["field"])), "rule": r["rule"],
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
    row.eligibility = selectors.approver_eligibility(row) if row.outcome["outcome"] == "PENDING" else None
    return row


def _request_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError as exc:
        raise Http404("unknown confirmation request") from exc


@login_required
@require_GET
def pending(request: HttpRequest) -> HttpResponse:
    """The requests the signed-in user may decide now, newest first."""
    rows = [_present(r, user=request.user) for r in selectors.requests_decidable_by(user=request.user)]
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
    rows = [_present(r, user=request.user) for r in page.object_list]
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
    rid = _request_id(request_id)
    row = selectors.requests_decidable_by(user=request.user).filter(pk=rid).first()
    tab = "pending"
    if row is None:
        row, tab = selectors.requests_history_for(user=request.user).filter(pk=rid).first(), "history"
    if row is None:
        raise Http404("unknown confirmation request")
    return render(request, "approvals/dashboard.html", {
        "tab": tab, "rows": [_present(row, user=request.user)], "approve_form": ApproveForm(),
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


def _refusal_text(error: DomainError) -> str:
    """What a person reads for a refused decision (REFUSALS), in the words that fit the case."""
    key = error.code
    if key == "ALREADY_DECIDED" and error.message == "you already decided this request":
        key = "ALREADY_DECIDED_BY_ME"
    return REFUSALS.get(key, "{message}").format(message=error.message)


def _refused(request: HttpRequest, error: DomainError) -> HttpResponse:
    if isinstance(error, NotFound):
        raise Http404(error.message)
    messages.error(request, _refusal_text(error), extra_tags=error.code)
    return redirect("approvals:pending")


@login_required
@require_POST
def approve(request: HttpRequest, request_id: str) -> HttpResponse:
    """Record an APPROVE with an optional comment. Refusals (expired, already decided, forbidden)
    become messages on the dashboard; an unknown or other tenant's request answers 404."""
    form = ApproveForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
        return redirect("approvals:pending")
    try:
        decided = services.confirmation_approve(
            request_id=_request_id(request_id), approver=request.user, comment=form.cleaned_data["comment"],
            arguments_hash=form.cleaned_data["arguments_hash"])
    except DomainError as error:
        return _refused(request, error)
    approvals = decided.approvals.filter(decision__in=(Approval.Decision.APPROVE, Approval.Decision.EDIT),
                                         revision=decided.revision).count()
    if decided.status == ConfirmationRequest.Status.CONFIRMED:
        text = (f"Approved ({approvals}/{decided.quorum}): quorum reached, the call runs now. "
                f"/ 已批准，达到法定人数，操作即将执行。 — {decided.summary}")
    else:
        text = (f"Approved ({approvals}/{decided.quorum}): waiting for {decided.quorum - approvals} more approver(s). "
                f"/ 已批准，还需 {decided.quorum - approvals} 位审批人。 — {decided.summary}")
    messages.success(request, text)
    return redirect("approvals:pending")


def _form_refused(request: HttpRequest, form) -> HttpResponse:
    """An invalid decision form: its errors as one INVALID_ARGUMENTS message, back to the pending tab."""
    messages.error(request, " ".join(e for errors in form.errors.values() for e in errors),
                   extra_tags="INVALID_ARGUMENTS")
    return redirect("approvals:pending")


@login_required
@require_POST
def reject(request: HttpRequest, request_id: str) -> HttpResponse:
    """Reject with a required reason; the requester's run resumes and the model is told REJECTED."""
    form = RejectForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, form)
    try:
        decided = services.confirmation_reject(
            request_id=_request_id(request_id), approver=request.user, reason=form.cleaned_data["reason"])
    except DomainError as error:
        return _refused(request, error)
    messages.success(request, f"Rejected; nothing will run. / 已拒绝，不会执行。 — {decided.summary}")
    return redirect("approvals:pending")


def _edited_arguments(row: ConfirmationRequest, submitted: dict[str, str]) -> dict[str, Any]:
    """The complete arguments of an edit from the form: a field left as shown (its masked value)
    keeps the stored value, so an approver never needs (or sees) the unmasked one; a changed field
    is taken as typed (text; JSON for an argument that was a number or boolean), an emptied one as
    not given. The tool then validates and normalises the whole (tools.approval_edit)."""
    arguments = dict(row.arguments or {})
    shown = row.masked_arguments or {}
    for name, text in submitted.items():
        if name not in arguments or text == _edit_value(shown.get(name)):
            continue
        text = text.strip()
        if not text:
            arguments[name] = None
            continue
        value: Any = text
        if isinstance(arguments[name], (int, float, bool)):  # keep a number a number (the schema decides)
            try:
                value = json.loads(text)
            except ValueError:
                pass
        arguments[name] = value
    return arguments


@login_required
@require_POST
def edit(request: HttpRequest, request_id: str) -> HttpResponse:
    """Edit the arguments (issue 13 item 3): the fields of the card's edit form, checked by the tool;
    the quorum restarts and the edit counts as the editor's approval, never alone."""
    rid = _request_id(request_id)
    row = selectors.request_as_seen_by_decider(user=request.user, request_id=rid)
    if row is None:
        raise Http404("unknown confirmation request")
    form = EditForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, form)
    submitted = {key[len("arg:"):]: value for key, value in request.POST.items() if key.startswith("arg:")}
    try:
        edited = amendments.confirmation_edit(
            request_id=rid, editor=request.user, arguments=_edited_arguments(row, submitted),
            base_arguments_hash=form.cleaned_data["base_arguments_hash"], comment=form.cleaned_data["comment"])
    except DomainError as error:
        if getattr(error, "errors", None) and error.code != "EDIT_NOT_ALLOWED":  # that one names its fields
            detail = "; ".join(f"{e.get('field')}: {e.get('error')}" for e in error.errors)
            error.message = f"{error.message} ({detail}) / 参数无效，未修改。"
        return _refused(request, error)
    messages.success(request, f"Edited: {edited.summary}. Another approver must approve the new arguments. "
                              f"/ 已修改参数，需其他审批人批准。")
    return redirect("approvals:pending")


@login_required
@require_POST
def respond(request: HttpRequest, request_id: str) -> HttpResponse:
    """Respond with guidance instead of deciding: nothing runs, the assistant reads the guidance."""
    form = RespondForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, form)
    try:
        decided = amendments.confirmation_respond(request_id=_request_id(request_id), approver=request.user,
                                                  guidance=form.cleaned_data["guidance"])
    except DomainError as error:
        return _refused(request, error)
    messages.success(request, f"Guidance sent to the assistant; nothing will run. / 已发送指导意见，不会执行。 — "
                              f"{decided.summary}")
    return redirect("approvals:pending")


@login_required
@require_GET
def mine(request: HttpRequest) -> HttpResponse:
    """My requests (issue 13 item 6): every gated call I made, newest first, with who decided what,
    their comments and edits, the expiry, and Withdraw while pending."""
    page = Paginator(selectors.requests_of(user=request.user), HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    rows = []
    regates = selectors.regates_of(tenant_id=request.user.tenant_id, request_ids=[r.pk for r in page.object_list])
    for row in page.object_list:
        row.regated = regates.get(row.pk)  # sent back to approvers under a stricter policy, and why
        row.decisions = list(row.approvals.all())
        row.outcome = selectors.outcome_of(row)
        row.decider = services.decider(row)
        row.argument_items = _argument_items(row.masked_arguments)
        row.can_withdraw = row.outcome["outcome"] == "PENDING"
        row.shortfall = selectors.quorum_shortfall(row) if row.can_withdraw else 0
        rows.append(row)
    return render(request, "approvals/my_requests.html", {"rows": rows, "page": page})


@login_required
@require_POST
def withdraw(request: HttpRequest, request_id: str) -> HttpResponse:
    """Withdraw my pending request: nothing runs, its token is void, the run is told (WITHDRAWN)."""
    form = WithdrawForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        withdrawn = amendments.confirmation_withdraw(request_id=_request_id(request_id), requester=request.user,
                                                     reason=reason)
    except DomainError as error:
        if isinstance(error, NotFound):
            raise Http404(error.message)
        messages.error(request, _refusal_text(error), extra_tags=error.code)
        return redirect("approvals:mine")
    messages.success(request, f"Withdrawn; nothing will run. / 已撤回，不会执行。 — {withdrawn.summary}")
    return redirect("approvals:mine")
