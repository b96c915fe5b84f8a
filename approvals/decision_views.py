"""The decisions posted from the approver dashboard and My requests: approve, reject, edit,
respond, withdraw. Thin: each calls one service (which re-checks tenant, `approve_tool`,
own-request, expiry and state under a row lock) and turns a refusal into a Django message; another
tenant's or an unknown request answers 404.
"""
from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import DomainError, NotFoundError
from approvals import amendments, approver_actions, claims, eligibility, requester_actions, selectors
from approvals.cards import edit_value, request_id_or_404
from approvals.forms import ApproveForm, EditForm, RejectForm, RespondForm, WithdrawForm
from approvals.models import ConfirmationRequest

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


def _refusal_text(error: DomainError) -> str:
    """What a person reads for a refused decision (REFUSALS), in the words that fit the case."""
    key = error.code
    if key == "ALREADY_DECIDED" and error.message == "you already decided this request":
        key = "ALREADY_DECIDED_BY_ME"
    return REFUSALS.get(key, "{message}").format(message=error.message)


def _refused(request: HttpRequest, error: DomainError) -> HttpResponse:
    if isinstance(error, NotFoundError):
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
        decided = approver_actions.confirmation_approve(
            request_id=request_id_or_404(request_id), approver=request.user, comment=form.cleaned_data["comment"],
            arguments_hash=form.cleaned_data["arguments_hash"])
    except DomainError as error:
        return _refused(request, error)
    claims.claim_release_on_decision(request_id=decided.pk, user=request.user)
    approvals = eligibility.approvals_counted(decided)
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
        decided = approver_actions.confirmation_reject(
            request_id=request_id_or_404(request_id), approver=request.user, reason=form.cleaned_data["reason"])
    except DomainError as error:
        return _refused(request, error)
    claims.claim_release_on_decision(request_id=decided.pk, user=request.user)
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
        if name not in arguments or text == edit_value(shown.get(name)):
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
    """Edit the arguments: the fields of the card's edit form, checked by the tool;
    the quorum restarts and the edit counts as the editor's approval, never alone."""
    rid = request_id_or_404(request_id)
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
    claims.claim_release_on_decision(request_id=edited.pk, user=request.user)
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
        decided = amendments.confirmation_respond(request_id=request_id_or_404(request_id), approver=request.user,
                                                  guidance=form.cleaned_data["guidance"])
    except DomainError as error:
        return _refused(request, error)
    claims.claim_release_on_decision(request_id=decided.pk, user=request.user)
    messages.success(request, f"Guidance sent to the assistant; nothing will run. / 已发送指导意见，不会执行。 — "
                              f"{decided.summary}")
    return redirect("approvals:pending")


@login_required
@require_POST
def withdraw(request: HttpRequest, request_id: str) -> HttpResponse:
    """Withdraw my pending request: nothing runs, its token is void, the run is told (WITHDRAWN)."""
    form = WithdrawForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        withdrawn = requester_actions.confirmation_withdraw(request_id=request_id_or_404(request_id), requester=request.user,
                                                     reason=reason)
    except DomainError as error:
        if isinstance(error, NotFoundError):
            raise Http404(error.message)
        messages.error(request, _refusal_text(error), extra_tags=error.code)
        return _back_to_mine(request, request_id)
    messages.success(request, f"Withdrawn; nothing will run. / 已撤回，不会执行。 — {withdrawn.summary}")
    return _back_to_mine(request, request_id)


def _back_to_mine(request: HttpRequest, request_id: str) -> HttpResponse:
    """My requests, or the request's own page when the form was posted from it (`back=page`)."""
    if request.POST.get("back") == "page":
        return redirect("approvals:mine-detail", request_id=request_id_or_404(request_id))
    return redirect("approvals:mine")
