"""Reads of confirmation requests for the people who decide them (dashboard and API).

Scoping rules: same tenant, `approve_tool` held on the request's tool (user or group grant, no
global grant, as django-guardian's `accept_global_perms=False`), approver-gated policy, never the
reader's own request. The requester's own reads are approvals.requester_selectors.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import F, Func, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.db.models.lookups import IsNull
from guardian.shortcuts import get_objects_for_user

from core import clock
from approvals import independence
from approvals.models import Approval, ConfirmationRequest
from approvals.rules import COUNTED


Status = ConfirmationRequest.Status


def _approvable_tools(user) -> QuerySet:
    """Tool rows `user` holds `approve_tool` on (approvals sits below tools: no import of tools)."""
    tool_model = ConfirmationRequest._meta.get_field("tool").related_model
    return get_objects_for_user(user, "tools.approve_tool", klass=tool_model, accept_global_perms=False)


def approvable_tools(user) -> QuerySet:
    """Tool rows `user` holds `approve_tool` on (user or group grant, no global grant)."""
    return _approvable_tools(user)


def approvals_count_expression() -> Coalesce:
    """The number of APPROVE and EDIT decisions on a request's current revision, as a correlated
    subquery of the outer request row (one index probe on the decisions of that request).

    A subquery rather than a joined COUNT: a COUNT over a join groups every request the query
    matches before it can sort and cut a page, so a page of 25 cost the tenant's whole history;
    the subquery runs only for the rows a page returns (docs/performance.md, "Scale")."""
    counted = Approval.objects.filter(request=OuterRef("pk"), decision__in=COUNTED, revision=OuterRef("revision"))
    return Coalesce(Subquery(counted.order_by().annotate(n=Func(F("pk"), function="COUNT")).values("n")[:1],
                             output_field=IntegerField()), 0)


def decision_of(user, *, current_revision: bool = True) -> Subquery:
    """The id of a decision of `user` on the outer request (its current revision, or any when
    `current_revision` is False), or NULL: a scalar subquery, one index probe per row it is
    evaluated on.

    Scalar on purpose: PostgreSQL may run an EXISTS or IN over a correlated subquery as a hash of
    every row the subquery could match (here: every decision this user ever made, a table that grows
    with the history) built before the first row; a scalar subquery is always probed per row, so a
    page that stops after 25 rows probes about 25 times."""
    mine = Approval.objects.filter(request=OuterRef("pk"), approver=user)
    if current_revision:
        mine = mine.filter(revision=OuterRef("revision"))
    return Subquery(mine.order_by().values("pk")[:1])


def decided_by(user) -> IsNull:
    """Whether `user` decided the outer request's current revision (a boolean; see decision_of)."""
    return IsNull(decision_of(user), False)


def annotated(qs: QuerySet[ConfirmationRequest], user) -> QuerySet[ConfirmationRequest]:
    """Add `approvals_count` (APPROVE and EDIT decisions on the current revision: an edit restarts
    the quorum) and `decided_by_me` (on the current revision); prefetch the decisions. Both are
    correlated subqueries: no GROUP BY, so a sorted and limited page reads only its own rows."""
    return qs.select_related("user", "tool").prefetch_related("approvals__approver").annotate(
        approvals_count=approvals_count_expression(), decided_by_me=decided_by(user))


def _independent(qs: QuerySet[ConfirmationRequest], user) -> QuerySet[ConfirmationRequest]:
    """Keep the requests `user` is an independent approver of (approvals.independence)."""
    keep = independence.decidable_filter(user=user)
    return qs if keep is None else qs.filter(keep)


def requests_decidable_by(*, user) -> QuerySet[ConfirmationRequest]:
    """Approver-gated requests `user` may decide now, newest first.

    PENDING, not past `expires_at`, in the user's tenant, on a tool the user holds `approve_tool`
    on, not requested by the user, not already decided by the user, and for which the user is an
    independent approver (standing neither from the requester nor begun after the request was
    created: approvals.independence). Each row carries
    `approvals_count` (int) and `decided_by_me` (always False here). A user without a tenant gets
    an empty queryset. The service re-checks every rule when the decision is made.
    """
    if user.tenant_id is None or not user.is_active:
        return ConfirmationRequest.objects.none()
    qs = ConfirmationRequest.objects.open().filter(
        tenant_id=user.tenant_id,
        policy=ConfirmationRequest.Policy.APPROVERS,
        tool__in=_approvable_tools(user),
    ).exclude(user_id=user.pk)
    qs = annotated(_independent(qs, user), user).filter(decided_by_me=False)
    return qs.order_by("-created_at", "-pk")


def may_approve(*, user) -> bool:
    """True when `user` (active, of a tenant) holds `approve_tool` on at least one tool, through a
    user or group grant: the people who land on the approver dashboard after signing in."""
    if not getattr(user, "is_authenticated", False) or user.tenant_id is None or not user.is_active:
        return False
    return _approvable_tools(user).exists()


def count_decidable_by(*, user) -> int:
    """How many requests `user` may decide now (the navigation's count): the rules of
    `requests_decidable_by` in one COUNT statement, without its annotations; a decision on an
    earlier revision of an edited request does not take it off (they may decide the new one),
    as on the tab. 0 without a tenant (no query)."""
    if not getattr(user, "is_authenticated", False) or user.tenant_id is None or not user.is_active:
        return 0
    return _independent(ConfirmationRequest.objects.open().filter(
        tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.APPROVERS, tool__in=_approvable_tools(user),
    ).exclude(user_id=user.pk), user).filter(IsNull(decision_of(user), True)).count()


def requests_history_for(*, user) -> QuerySet[ConfirmationRequest]:
    """Approver-gated requests of the user's tenant that `user` can no longer decide, newest first.

    Decided (CONFIRMED, CONSUMED, CANCELLED), expired (EXPIRED, or PENDING past `expires_at` that
    the expiry sweep has not marked yet), or still pending but already decided by this user; on
    tools the user holds `approve_tool` on (other people's requests) or that the user decided.
    Rows carry `approvals_count` and `decided_by_me`.
    """
    if user.tenant_id is None or not user.is_active:
        return ConfirmationRequest.objects.none()
    now = clock.now()
    # A probe per row rather than `pk IN (every request this user ever decided)`: the IN list
    # grows with the user's history (decision_of).
    ever_decided = IsNull(decision_of(user, current_revision=False), False)
    qs = ConfirmationRequest.objects.filter(
        tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.APPROVERS,
    ).filter((Q(tool__in=_approvable_tools(user)) & ~Q(user_id=user.pk)) | ever_decided)
    qs = annotated(qs, user).filter(~ConfirmationRequest.open_q(now) | Q(decided_by_me=True))
    return qs.order_by("-created_at", "-pk")


def request_as_seen_by_decider(*, user, request_id) -> ConfirmationRequest | None:
    """One approver-gated request of the user's tenant with `approvals_count` and `decided_by_me`,
    as the lists above show it (used to answer a decision with the request's fresh state), or
    None when it is unknown or of another tenant."""
    if user.tenant_id is None:
        return None
    qs = ConfirmationRequest.objects.filter(
        pk=request_id, tenant_id=user.tenant_id, policy=ConfirmationRequest.Policy.APPROVERS)
    return annotated(qs, user).first()


# -- the facts beside the arguments ------------------------------------------------------------

ASSISTANT_TEXT_CAP = 280  # characters of a free-text argument shown before it is cut (with a marker)

_live_facts: Callable[[ConfirmationRequest], dict[str, Any] | None] | None = None


def register_live_facts(provider: Callable[[ConfirmationRequest], dict[str, Any] | None]) -> None:
    """Install the function that recomputes a request's facts now (tools.approval_context.live_facts,
    registered by tools.apps: approvals sits below tools and never imports it)."""
    global _live_facts
    _live_facts = provider


def _assistant_text(stored: dict[str, Any]) -> list[dict[str, Any]]:
    texts = []
    for name, text in (stored.get("written_by_assistant") or {}).items():
        text = str(text)
        texts.append({"field": name, "text": text[:ASSISTANT_TEXT_CAP], "truncated": len(text) > ASSISTANT_TEXT_CAP,
                      "length": len(text)})
    return texts


def approval_facts(request: ConfirmationRequest, *, live: bool = True) -> dict[str, Any]:
    """What a person deciding (or told about) `request` is shown beside its arguments.

    Returns {"snapshot": facts captured when the request was created (masked; {} when the tool
    declares none), "captured_at": ISO time or None, "live": the same facts recomputed now for a
    request still PENDING (masked; None when ended, not asked for, or unavailable), "changed":
    names of facts whose live value differs from the snapshot, "written_by_assistant": [{"field",
    "text" (at most ASSISTANT_TEXT_CAP characters), "truncated", "length"}]: the model's own words,
    to be shown quoted and labelled, never as the platform's}.
    Policy (docs/approvals.md): the snapshot is the record of what was shown; an open request's
    card shows the live values and marks the ones that changed since the request was made.
    Reads only the request's own tenant (the facts provider is scoped by the stored request).
    """
    stored = request.approval_context or {}
    snapshot = stored.get("facts") or {}
    current = None
    if live and _live_facts is not None and request.status == Status.PENDING and snapshot:
        current = _live_facts(request)
    changed = sorted(k for k in snapshot if current is not None and current.get(k) != snapshot[k])
    return {"snapshot": snapshot, "captured_at": stored.get("captured_at"), "live": current, "changed": changed,
            "written_by_assistant": _assistant_text(stored)}


# -- what an approver may edit, and who edited what ran ------------------------------------------

_edit_rules: Callable[[ConfirmationRequest], list[dict[str, Any]]] | None = None


def register_edit_rules(provider: Callable[[ConfirmationRequest], list[dict[str, Any]]]) -> None:
    """Install the function that says what an approver may change in a request
    (tools.approval_edit.edit_rules, registered by tools.apps: the rules are the tool's)."""
    global _edit_rules
    _edit_rules = provider


def edit_rules_of(request: ConfirmationRequest) -> list[dict[str, Any]]:
    """[{"field", "rule" (ANY | DECREASE_ONLY), "limit"}] an approver may edit in `request`; [] when
    nothing is editable or no tool registry is installed (fail closed: nothing offered)."""
    if _edit_rules is None or request.policy != ConfirmationRequest.Policy.APPROVERS:
        return []
    return _edit_rules(request)


def edit_provenance(*, request_id) -> dict[str, Any] | None:
    """Who changed the call `request_id` before it ran, for its execution's audit row and the
    requester: {"requested_by": username, "edited_by": [usernames, in edit order],
    "original_arguments_hash": the requester's binding, "revision": edits made}; None when nobody
    edited it (one query)."""
    rows = list(Approval.objects.filter(request_id=request_id, decision=Approval.Decision.EDIT)
                .select_related("approver", "request__user").order_by("revision"))
    if not rows:
        return None
    request = rows[0].request
    return {"requested_by": request.user.get_username(), "edited_by": [r.approver.get_username() for r in rows],
            "original_arguments_hash": request.original_arguments_hash, "revision": request.revision}


def outcome_of(request: ConfirmationRequest) -> dict[str, str]:
    """The real ending of a request for people and the API: {"outcome", "code", "label"}.

    outcome: PENDING, CONFIRMED (approved, waiting for its turn to run), EXECUTED (it ran and
    succeeded, or answered from the record of an identical earlier run: code IDEMPOTENT_HIT),
    FAILED (it ran and the business refused: code), REFUSED (confirmed, refused at consume time,
    nothing ran: code), REJECTED (an approver or the requester said no), CANCELLED (the run ended:
    RUN_ENDED, or TOOL_STOPPED: the tool was stopped), SUPERSEDED, EXPIRED, RESPONDED (an approver sent guidance instead, nothing ran),
    WITHDRAWN (the requester withdrew it). A failed call is never EXECUTED (docs/decisions.md).
    label: what a badge shows, e.g. "FAILED (REFUND_EXCEEDS_AMOUNT)".
    """
    code = request.outcome_code or ""
    if request.is_expired_at(clock.now()):
        outcome = "EXPIRED"
    elif request.status == Status.CONSUMED:
        outcome = "EXECUTED" if code in ("", "OK", "IDEMPOTENT_HIT") else "FAILED"
    elif request.status == Status.CANCELLED:
        outcome = "CANCELLED" if code in ("RUN_ENDED", "TOOL_STOPPED") else "REJECTED"
    elif request.status in (Status.REFUSED, Status.SUPERSEDED, Status.CONFIRMED, Status.PENDING, Status.RESPONDED,
                            Status.WITHDRAWN):
        outcome = request.status
    else:
        outcome = str(request.status)
    label = f"{outcome} ({code})" if outcome in ("FAILED", "REFUSED") and code else outcome
    return {"outcome": outcome, "code": code, "label": label}
