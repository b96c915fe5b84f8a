"""Writes on confirmation requests: create, confirm/cancel by token, approve/reject, consume, expire.

Every top-level service is one durable transaction that also writes its audit row; a denial is
audited after its transaction rolled back (STYLE rule 3). Settling a request sends
`confirmation_settled` inside the transaction; the runtime defers its resume to `on_commit`.
"""
from __future__ import annotations

import datetime
import hashlib
import re
import secrets
import uuid
from typing import Any

from django.db import transaction

from agentplatform import clock, correlation
from agentplatform.db import insert_instance, select_rows, update_row, update_rows
from agentplatform.errors import DomainError
from agentplatform.redaction import mask_text
from agentplatform.tenancy.service_accounts import is_service_account
from approvals import independence
from approvals.errors import (
    ApprovalForbidden,
    ApproverNotIndependent,
    ArgumentsChanged,
    ConfirmationRegated,
    ConsumeRefused,
    Regate,
    ConfirmationAlreadyDecided,
    ConfirmationExpired,
    ConfirmationNotFound,
    ReasonRequired,
)
from approvals.models import Approval, ConfirmationRequest
from approvals.presentation import regate_reason
from approvals.signals import approvers_needed, confirmation_settled
from audit import events

Status = ConfirmationRequest.Status
Policy = ConfirmationRequest.Policy
# Requests still waiting for a human. Only these expire: a CONFIRMED request is a decision already
# made, kept until its turn settles, and is never relabelled EXPIRED (docs/decisions.md).
UNDECIDED = (Status.PENDING,)
# Requests a newer intent for the same business action supersedes (item 7 of docs/decisions.md).
OPEN_STATES = (Status.PENDING, Status.CONFIRMED)
# Strictness of the approval policies that gate a call (NONE < REQUESTER < APPROVERS).
POLICY_RANK = {"NONE": 0, Policy.REQUESTER: 1, Policy.APPROVERS: 2}
TOKEN_BYTES = 32  # 256 random bits (issue 2, item 5)


TOKEN_PATTERN = re.compile(r"\bct_[A-Za-z0-9_\-]{16,}")


def redact_tokens(text: str) -> str:
    """Replace anything shaped like a confirmation token in free text with "[redacted token]".

    A user who pastes a token into a chat message must not send it to the model or the memory
    (seed 002 section 26: the token never goes into a prompt).
    """
    return TOKEN_PATTERN.sub("[redacted token]", text)


def decider(request: ConfirmationRequest) -> dict[str, str] | None:
    """Who ended `request`, as shown to the model and the people: {"role", "username"} with role
    "requester" (declined or confirmed with the token), "approver" (an Approval decided it), or
    "administrator" (cancelled the run); None when the platform ended it (expiry, supersession,
    refusal). Reads `decided_by` (select it with the request)."""
    if request.decided_by_id is None or request.decided_by is None:
        return None
    if request.decided_by_id == request.user_id:
        role = "requester"
    elif request.outcome_code == "RUN_ENDED":
        role = "administrator"
    else:
        role = "approver"
    return {"role": role, "username": request.decided_by.get_username()}


def token_digest(token: str) -> str:
    """Return the hex SHA-256 of a raw confirmation token; only this digest is ever stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _audit_refusal(*, actor, error: DomainError, request_id: uuid.UUID | None = None) -> None:
    """Audit a refused decision after its transaction rolled back. Unknown ids carry no tool."""
    request = None
    if request_id is not None and actor.tenant_id is not None:
        request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=actor.tenant_id).first()
    if request is not None:
        events.request_refused(request, actor_id=actor.pk, status=error.code, message=error.message)
    elif actor.tenant_id is not None:
        # An unknown id or token can be tried at will: sampled, not one row per attempt (item 8 of issue 9).
        events.unknown_request_refused(group=f"refused:{actor.tenant_id}:{actor.pk}:{error.code}",
                                       tenant_id=actor.tenant_id, actor_id=actor.pk, status=error.code,
                                       message=error.message)


def _needs_approvers(request: ConfirmationRequest) -> None:
    """Tell listeners (notifications) that an approver-gated request waits for approvers now."""
    if request.policy == Policy.APPROVERS and request.status == Status.PENDING:
        approvers_needed.send(sender=ConfirmationRequest, request_id=request.id, tenant_id=request.tenant_id)


def _settle(request: ConfirmationRequest) -> None:
    confirmation_settled.send(
        sender=ConfirmationRequest, request_id=request.id, run_id=request.run_id, status=request.status,
        policy=request.policy,
    )


@transaction.atomic(savepoint=False)  # inside the run's step: one transaction, no savepoint (issue 11)
def confirmation_create(
    *,
    tenant_id: int,
    user_id: int,
    conversation_id: uuid.UUID,
    run_id: uuid.UUID | None,
    tool_call_id: str,
    tool_id: int,
    tool_name: str,
    arguments: dict[str, Any],
    masked_arguments: dict[str, Any],
    arguments_hash: str,
    summary: str,
    risk: str,
    policy: str,
    quorum: int,
    ttl_seconds: int,
    context_excerpt: str = "",
    idempotency_key: str = "",
    business_object: str = "",
    approval_context: dict[str, Any] | None = None,
) -> tuple[ConfirmationRequest, str | None]:
    """Create a PENDING request for one gated call; older open requests for the same business
    action (same idempotency key, or same declared business object) become SUPERSEDED.

    Returns (request, raw_token). The raw token (256 random bits, url-safe) exists only for
    requester-confirmed calls and is returned once; only its SHA-256 is stored. Approver-gated
    requests return None as the token. approval_context: the tool's facts and the assistant's
    free text, already masked by the caller (approvals.selectors.approval_facts reads it).
    """
    raw_token = None
    digest = None
    if policy == ConfirmationRequest.Policy.REQUESTER:
        raw_token = "ct_" + secrets.token_urlsafe(TOKEN_BYTES)
        digest = token_digest(raw_token)
    # A prebuilt INSERT (agentplatform.db.insert_instance; no save() override, no signal receiver).
    request = insert_instance(ConfirmationRequest(
        tenant_id=tenant_id,
        user_id=user_id,
        conversation_id=conversation_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        tool_id=tool_id,
        tool_name=tool_name,
        arguments=arguments,
        masked_arguments=masked_arguments,
        arguments_hash=arguments_hash,
        summary=mask_text(summary)[:500],
        risk=risk,
        policy=policy,
        quorum=quorum,
        token_hash=digest,
        context_excerpt=mask_text(context_excerpt)[:2000],
        expires_at=clock.now() + datetime.timedelta(seconds=ttl_seconds),
        idempotency_key=idempotency_key[:128],
        business_object=business_object[:200],
        approval_context=approval_context or {},
    ))
    confirmations_supersede(request=request)
    _needs_approvers(request)
    return request, raw_token


def _token_where(token: str, user, conversation_id=None) -> dict[str, Any]:
    """The conditions that find the user's own request by its raw token (only its digest is
    stored), in their tenant and, when given, in that conversation. Raises ConfirmationNotFound
    for a token that cannot be one (not a string, empty, over 200 characters) or a user without
    a tenant."""
    if not isinstance(token, str) or not token or len(token) > 200 or user.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation token")
    where = {"token_hash": token_digest(token), "tenant_id": user.tenant_id, "user_id": user.pk}
    if conversation_id is not None:
        where["conversation_id"] = conversation_id
    return where


def _lock_by_token(where: dict[str, Any]) -> ConfirmationRequest:
    """Lock and read the request `_token_where` found. Raises ConfirmationNotFound."""
    found = select_rows(ConfirmationRequest, where, for_update=True, limit=1)
    if not found:
        raise ConfirmationNotFound("unknown confirmation token")
    return found[0]


def _require_open(request: ConfirmationRequest, *, now: datetime.datetime) -> None:
    if request.status == Status.EXPIRED or (request.status in UNDECIDED and request.expires_at <= now):
        raise ConfirmationExpired(f"confirmation {request.id} expired at {request.expires_at.isoformat()}")
    if request.status != Status.PENDING:
        raise ConfirmationAlreadyDecided(f"confirmation {request.id} is already {request.status}")


def _guarded(fn, *, actor, request_id: uuid.UUID | None = None, **kwargs):
    """Run a durable decision; on refusal audit it after the rollback, expire if due, re-raise."""
    try:
        return fn(actor=actor, request_id=request_id, **kwargs) if request_id else fn(actor=actor, **kwargs)
    except DomainError as error:
        if isinstance(error, ConfirmationExpired):
            rid = request_id or getattr(error, "request_id", None)
            if rid:
                confirmations_expire(request_ids=[rid])
        _audit_refusal(actor=actor, error=error, request_id=request_id or getattr(error, "request_id", None))
        raise


@transaction.atomic(durable=True)
def _confirm_by_token(*, actor, token: str, cancel: bool, conversation_id=None) -> ConfirmationRequest:
    where = _token_where(token, actor, conversation_id)
    now = clock.now()
    if cancel:
        changes = {"status": Status.CANCELLED, "decided_at": now, "decision_reason": "declined by the requester"}
        audit_event = events.request_cancelled
    else:
        changes = {"status": Status.CONFIRMED, "confirmed_at": now, "decided_at": now}
        audit_event = events.request_confirmed
    changes["decided_by"] = actor.pk
    # The decision is one compare-and-set on an open request (PENDING, not expired), which also
    # reads the row it changed (issue 11: no lock read before it). When it matches nothing, the
    # locked read below says why: unknown token (404), expired (410) or already decided (409).
    changed = update_rows(ConfirmationRequest, {**where, "status": Status.PENDING, "expires_at__gt": now}, changes)
    request = changed[0] if changed else _lock_by_token(where)
    correlation.set_run_id(request.run_id)  # a refusal's error body names the run too
    if not changed:
        try:
            _require_open(request, now=now)
        except DomainError as error:
            error.request_id = request.id  # type: ignore[attr-defined]
            raise
        update_row(ConfirmationRequest, request.pk, changes)  # open after all (the clock moved): decide it
        for name, value in changes.items():
            setattr(request, "decided_by_id" if name == "decided_by" else name, value)
    audit_event(request, actor_id=actor.pk)
    _settle(request)
    return request


def confirmation_confirm(*, token: str, user, conversation_id=None) -> ConfirmationRequest:
    """The requester confirms their own gated call with the raw token (seed 002 section 25).

    conversation_id: when given, the token must belong to a request of that conversation.
    Returns the CONFIRMED request; the run resumes after commit. Raises ConfirmationNotFound
    (unknown token, other user, tenant or conversation: 404), ConfirmationExpired (410),
    ConfirmationAlreadyDecided (replayed or decided token: 409).
    """
    return _guarded(_confirm_by_token, actor=user, token=token, cancel=False, conversation_id=conversation_id)


def confirmation_cancel(*, token: str, user) -> ConfirmationRequest:
    """The requester declines their own gated call. Same errors as `confirmation_confirm`."""
    return _guarded(_confirm_by_token, actor=user, token=token, cancel=True)


def require_independent(*, actor, request: ConfirmationRequest) -> None:
    """Refuse a decision of `actor` on `request` that would not count toward its quorum (DESIGN
    section 8: a decision counts only from an approver independent of the request;
    approvals.independence). Raises ApproverNotIndependent saying why."""
    standing = independence.assess(user=actor, request=request)
    if not standing.eligible:
        raise ApproverNotIndependent(f"your decision would not count toward this request: {standing.reason}")


@transaction.atomic(durable=True)
def _decide(*, actor, request_id: uuid.UUID, approve: bool, comment: str, arguments_hash: str = "") -> ConfirmationRequest:
    comment = mask_text(comment)  # stored, shown to the requester and the model, audited
    if actor.tenant_id is None:
        raise ConfirmationNotFound("unknown confirmation request")
    request = (
        ConfirmationRequest.objects.select_for_update(of=("self",))
        .select_related("tool")
        .filter(pk=request_id, tenant_id=actor.tenant_id)
        .first()
    )
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    if request.policy != ConfirmationRequest.Policy.APPROVERS:
        raise ApprovalForbidden("this call is confirmed by its requester, not by approvers")
    if request.user_id == actor.pk:
        raise ApprovalForbidden("a requester never approves their own call")
    refuse_service_account(actor)
    if not actor.has_perm("tools.approve_tool", request.tool):
        raise ApprovalForbidden("you do not hold approve_tool on this tool")
    require_independent(actor=actor, request=request)
    now = clock.now()
    correlation.set_run_id(request.run_id)
    # One decision per approver and revision: an edit restarts the quorum (issue 13 item 3). Checked
    # before whether the request is still open: a second click after the first one ended it (a
    # rejection, the approval that reached the quorum) is told that its first decision stands.
    if Approval.objects.filter(request=request, approver=actor, revision=request.revision).exists():
        raise ConfirmationAlreadyDecided("you already decided this request")
    _require_open(request, now=now)
    # An approval is of the arguments the approver saw: when they were edited meanwhile (or the
    # request was ever edited and the approver does not say which arguments), it is refused.
    if approve and (arguments_hash or request.revision) and arguments_hash != request.arguments_hash:
        raise ArgumentsChanged("the arguments were edited; read them again and approve the edited arguments "
                               "(send their arguments_hash)")
    Approval.objects.create(
        request=request, approver=actor, decision=Approval.Decision.APPROVE if approve else Approval.Decision.REJECT,
        comment=comment[:2000], revision=request.revision, arguments_hash=request.arguments_hash,
    )
    if not approve:
        request.status = Status.CANCELLED
        request.decided_at = now
        request.decided_by = actor
        request.decision_reason = comment[:500]
    elif quorum_reached([a for a in request.approvals.filter(revision=request.revision).select_related("approver")
                         if not is_service_account(a.approver)],  # never counted, however it got there
                        quorum=request.quorum, revision=request.revision):
        request.status = Status.CONFIRMED
        request.confirmed_at = request.decided_at = now
        request.decided_by = actor
    request.save(update_fields=["status", "confirmed_at", "decided_at", "decided_by", "decision_reason"])
    (events.request_approved if approve else events.request_rejected)(request, actor_id=actor.pk, message=comment[:200])
    if request.status != Status.PENDING:
        _settle(request)
    return request


def confirmation_approve(*, request_id: uuid.UUID, approver, comment: str = "",
                         arguments_hash: str = "") -> ConfirmationRequest:
    """Record one approver's APPROVE; at quorum the request becomes CONFIRMED and the run resumes.

    Rules: same tenant, `approve_tool` on the tool, not the requester, one decision per approver
    and revision, CRITICAL quorum of distinct approvers (DESIGN section 8), an edit never confirmed
    by its editor alone (`quorum_reached`). arguments_hash: the binding the approver saw; required
    once the request was edited (issue 13 item 3). Raises ConfirmationNotFound (404),
    ApprovalForbidden (403), ConfirmationExpired (410), ConfirmationAlreadyDecided (409),
    ArgumentsChanged (409: the arguments were edited since the approver read them).
    """
    return _guarded(_decide, actor=approver, request_id=request_id, approve=True, comment=comment,
                    arguments_hash=arguments_hash or "")


def confirmation_reject(*, request_id: uuid.UUID, approver, reason: str) -> ConfirmationRequest:
    """Reject the request (CANCELLED) with a required reason; the model is told it was rejected.

    Raises ReasonRequired for a blank reason, otherwise as `confirmation_approve`.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReasonRequired("a rejection needs a reason")
    return _guarded(_decide, actor=approver, request_id=request_id, approve=False, comment=reason.strip())


# Decisions that count towards a quorum: an approval, or an edit (the editor approves what they wrote).
COUNTED = (Approval.Decision.APPROVE, Approval.Decision.EDIT)


def refuse_service_account(actor) -> None:
    """Raise ApprovalForbidden when `actor` is a service account: a program's account never
    approves, rejects, edits or counts toward a quorum, whatever it was granted (docs/roles.md,
    "Service accounts"; the grant itself is refused by the control-plane rules)."""
    if is_service_account(actor):
        raise ApprovalForbidden("a service account never decides an approval or counts toward a quorum "
                                "/ 服务账号不能审批")


def quorum_reached(approvals: list[Approval], *, quorum: int, revision: int) -> bool:
    """Whether `approvals` (decisions on one request) confirm its `revision`: at least `quorum`
    APPROVE/EDIT decisions on that revision, and, when it was edited, at least one of them by
    someone other than its editor: an approver never approves their own edit alone (issue 13
    item 3; docs/approvals.md). Approvers are distinct by the one-decision-per-revision constraint."""
    counted = [a for a in approvals if a.revision == revision and a.decision in COUNTED]
    editors = {a.approver_id for a in counted if a.decision == Approval.Decision.EDIT}
    if editors and not any(a.approver_id not in editors for a in counted):
        return False
    return len(counted) >= quorum


def standing_approvals(request: ConfirmationRequest) -> list[Approval]:
    """The APPROVE and EDIT decisions on the current revision of `request` whose approvers still
    stand now: active, a person (never a service account), of the request's tenant, not its
    requester, holding `tools.approve_tool` on its tool, and independent of the request
    (approvals.independence: standing neither from the requester nor begun after the request was
    created). Each counted approver's standing is evaluated again at consume
    time. `request` needs `created_at`. Approvers are distinct by the
    `one_decision_per_approver_and_revision` constraint."""
    approvals = Approval.objects.filter(request_id=request.pk, decision__in=COUNTED, revision=request.revision) \
        .select_related("approver")
    return [a for a in approvals
            if a.approver.is_active and not is_service_account(a.approver)
            and a.approver.tenant_id == request.tenant_id
            and a.approver_id != request.user_id and a.approver.has_perm("tools.approve_tool", request.tool)
            and independence.assess(user=a.approver, request=request).eligible]


def _required(stored: ConfirmationRequest, *, policy: str, quorum: int) -> tuple[str, int]:
    """The policy and quorum a decision must satisfy now: the stricter of what it was asked under
    and what is in force (a looser policy never lowers what was already asked)."""
    now_rank, stored_rank = POLICY_RANK.get(policy, 0), POLICY_RANK.get(stored.policy, 0)
    if now_rank > stored_rank:
        return policy, quorum
    if now_rank < stored_rank or policy != Policy.APPROVERS:
        return stored.policy, stored.quorum
    return Policy.APPROVERS, max(quorum, stored.quorum)


def confirmation_consume(
    *,
    request_id: uuid.UUID,
    tenant_id: int,
    user_id: int,
    conversation_id: uuid.UUID,
    tool_name: str,
    arguments_hash: str,
    policy: str,
    quorum: int,
    risk: str,
    ttl_seconds: int,
) -> int:
    """Consume a CONFIRMED request with one compare-and-set (DESIGN step 7), then check that the
    decision it carries satisfies the policy in force now. Call inside the transaction that
    executes the call, so consumption and side effect commit (or roll back) together.

    policy / quorum / risk / ttl_seconds: the tool's effective policy now (tools.policy).
    Decisions are evaluated again here (DESIGN section 8; docs/decisions.md): a policy that
    became stricter (REQUESTER -> APPROVERS, a higher quorum, an approver who lost
    `approve_tool`) raises ConfirmationRegated; DENY raises ConsumeRefused(POLICY_DENIED). A
    looser policy keeps what was already asked. A CONFIRMED request does not expire.

    Returns the consumed request's revision (0: its arguments were never edited). Raises
    ConfirmationExpired when the request expired undecided, or
    ConfirmationNotFound (code CONFIRMATION_INVALID) for any binding mismatch, a replay, or a
    request that is not CONFIRMED; ConfirmationRegated, ConsumeRefused as above.
    """
    now = clock.now()
    # One compare-and-set that also returns what the re-evaluation below needs (issue 11).
    consumed = update_row(
        ConfirmationRequest, request_id, {"status": Status.CONSUMED, "consumed_at": now},
        where={"status": Status.CONFIRMED, "tenant_id": tenant_id, "user_id": user_id,
               "conversation_id": conversation_id, "tool_name": tool_name, "arguments_hash": arguments_hash},
        returning=("policy", "quorum", "tool", "revision", "created_at"))
    if consumed is None:
        request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=tenant_id).first()
        if request is not None and (request.status == Status.EXPIRED
                                    or (request.status in UNDECIDED and request.expires_at <= now)):
            raise ConfirmationExpired("the confirmation expired before it was used")
        raise ConfirmationNotFound("no consumable confirmation for exactly this call")
    if policy == "DENY":
        raise ConsumeRefused(f"the policy of {tool_name} now denies every call", code="POLICY_DENIED")
    stored = ConfirmationRequest(pk=request_id, tenant_id=tenant_id, user_id=user_id, policy=consumed["policy"],
                                 quorum=consumed["quorum"], tool_id=consumed["tool_id"],  # tool: read if needed
                                 revision=consumed["revision"], created_at=consumed["created_at"])
    needed_policy, needed_quorum = _required(stored, policy=policy, quorum=quorum)
    if needed_policy != Policy.APPROVERS:
        return stored.revision
    standing = standing_approvals(stored) if stored.policy == Policy.APPROVERS else []
    if quorum_reached(standing, quorum=needed_quorum, revision=stored.revision):
        return stored.revision
    counted = len(standing)
    if stored.policy != Policy.APPROVERS:
        cause = "APPROVERS_NOW"
    elif needed_quorum > stored.quorum:
        cause = "QUORUM_RAISED"
    else:
        cause = "APPROVALS_LAPSED"
    reason, reason_zh = regate_reason(cause=cause, tool=tool_name, quorum=needed_quorum, counted=counted, risk=risk)
    raise ConfirmationRegated(Regate(policy=Policy.APPROVERS, quorum=needed_quorum, risk=risk, ttl_seconds=ttl_seconds,
                                     reason=reason, reason_zh=reason_zh, cause=cause, counted=counted))


@transaction.atomic  # within the run's step (issue 11), after the consuming savepoint rolled back
def confirmation_regate(*, request_id: uuid.UUID, regate: Regate) -> ConfirmationRequest | None:
    """Put a CONFIRMED request back to PENDING under the stricter policy in force (new policy,
    quorum and risk, a fresh TTL, the requester's token void; approvals that still stand keep
    counting). Audited as CONFIRMATION_REQUIRED with status REGATED and the reason.

    Returns the request, or None when it was no longer CONFIRMED (another consumer got there).
    """
    now = clock.now()
    changed = ConfirmationRequest.objects.filter(pk=request_id, status=Status.CONFIRMED).update(
        status=Status.PENDING, policy=regate.policy, quorum=regate.quorum, risk=regate.risk, token_hash=None,
        confirmed_at=None, decided_at=None, decided_by=None,
        expires_at=now + datetime.timedelta(seconds=regate.ttl_seconds), decision_reason=mask_text(regate.told())[:500],
    )
    if changed != 1:
        return None
    request = ConfirmationRequest.objects.get(pk=request_id)
    events.request_regated(request, actor_id=None, status="REGATED",
                           message=regate.told())
    _needs_approvers(request)
    return request


def _binding_where(*, tenant_id: int, user_id: int, conversation_id: uuid.UUID, tool_name: str,
                   arguments_hash: str = "") -> dict[str, Any]:
    """The conditions that match a request only from the call it is bound to (DESIGN section 8):
    the tenant, the requester, the conversation, the tool and, once known, the arguments hash."""
    where = {"tenant_id": tenant_id, "user_id": user_id, "conversation_id": conversation_id, "tool_name": tool_name}
    if arguments_hash:
        where["arguments_hash"] = arguments_hash
    return where


@transaction.atomic  # within the run's step (issue 11), after the consuming savepoint rolled back
def confirmation_refuse(*, request_id: uuid.UUID, code: str, message: str, tenant_id: int, user_id: int,
                        conversation_id: uuid.UUID, tool_name: str, arguments_hash: str = "") -> bool:
    """End a CONFIRMED request that could not be consumed (REFUSED, `outcome_code` = code), after
    the consuming transaction rolled back. Audited as REFUSED.

    tenant_id / user_id / conversation_id / tool_name / arguments_hash ("" while unknown): the
    binding of the call that carried it; a call with another binding never ends it (a consumer
    that is not the request's own is refused without burning the human's decision; docs/decisions.md).
    Returns False when no CONFIRMED request with that id and binding exists.
    """
    now = clock.now()
    binding = _binding_where(tenant_id=tenant_id, user_id=user_id, conversation_id=conversation_id,
                             tool_name=tool_name, arguments_hash=arguments_hash)
    changed = ConfirmationRequest.objects.filter(pk=request_id, status=Status.CONFIRMED, **binding).update(
        status=Status.REFUSED, outcome_code=str(code)[:64], decision_reason=str(message)[:500], decided_at=now)
    if changed != 1:
        return False
    request = ConfirmationRequest.objects.get(pk=request_id)
    events.request_refused(request, actor_id=None, status=code, message=message)
    return True


def confirmation_spend_failed(*, request_id: uuid.UUID, code: str, tenant_id: int, user_id: int,
                              conversation_id: uuid.UUID, tool_name: str, arguments_hash: str = "") -> bool:
    """End a CONFIRMED request whose execution was attempted and raised, after the consuming
    transaction rolled back: CONSUMED (the decision was spent on that attempt) with `outcome_code`
    = code, so people see FAILED (code), never a request still waiting to run on a finished run
    (docs/decisions.md). The call's own audit row (FAILED, with this confirmation) records it.
    The binding arguments are as for `confirmation_refuse`. One UPDATE. Returns False when no
    CONFIRMED request with that id and binding exists."""
    now = clock.now()
    binding = _binding_where(tenant_id=tenant_id, user_id=user_id, conversation_id=conversation_id,
                             tool_name=tool_name, arguments_hash=arguments_hash)
    return update_row(ConfirmationRequest, request_id, {"status": Status.CONSUMED, "consumed_at": now,
                                                         "outcome_code": str(code)[:64]},
                      where={"status": Status.CONFIRMED, **binding}) == 1


def confirmation_record_outcome(*, request_id: uuid.UUID, code: str) -> None:
    """Store what happened when a request was consumed (OK, a business failure code,
    IDEMPOTENT_HIT). Call inside the consuming transaction; one UPDATE."""
    update_row(ConfirmationRequest, request_id, {"outcome_code": code[:64]})


def confirmations_supersede(*, request: ConfirmationRequest) -> list[uuid.UUID]:
    """Mark the older open requests (PENDING or CONFIRMED, not yet consumed) for the same business
    action as `request` SUPERSEDED: the same tenant, requester and tool, and the same idempotency
    key, or the same declared business object. Another user's request is never superseded (a peer
    must not be able to end my request); their executions are kept apart by the precheck and the
    idempotency record at consume time. Only the latest intent can then be approved (docs/decisions.md).
    Each is audited (CANCELLED, status SUPERSEDED) and settled, so its run answers the call.
    Call inside the transaction that created `request`. Returns the superseded ids."""
    if not request.idempotency_key and not request.business_object:
        return []
    same = {}
    if request.idempotency_key:
        same["idempotency_key"] = request.idempotency_key
    if request.business_object:
        same["business_object"] = request.business_object
    # A prebuilt statement (every gated call creates a request; issue 11).
    older = select_rows(ConfirmationRequest, {"tenant_id": request.tenant_id, "user_id": request.user_id,
                                              "tool_name": request.tool_name, "status__in": OPEN_STATES},
                        any_of=same, order_by=("created_at",))
    superseded = []
    reason = f"superseded by a newer request for the same action ({request.summary[:200]})"
    for old in older:
        if old.pk == request.pk:
            continue
        changed = update_row(ConfirmationRequest, old.pk,
                             {"status": Status.SUPERSEDED, "decided_at": clock.now(),
                              "decision_reason": reason[:500], "outcome_code": "SUPERSEDED"},
                             where={"status": old.status})
        if changed != 1:
            continue
        old.status = Status.SUPERSEDED
        events.request_cancelled(old, actor_id=None, status="SUPERSEDED",
                                 message=f"superseded by request {request.pk}")
        _settle(old)
        superseded.append(old.pk)
    return superseded


@transaction.atomic
def confirmations_expire(*, request_ids: list[uuid.UUID] | None = None, limit: int = 500,
                         tenant_id: int | None = None) -> list[uuid.UUID]:
    """Mark PENDING requests past `expires_at` EXPIRED, audit each, and settle them (a CONFIRMED
    request is a decision already made and never expires; it runs when its turn settles).

    `request_ids` restricts the sweep (used right after a late decision); `tenant_id` restricts
    it to one tenant (settle-on-read). Returns the ids expired by this call; a request expired
    concurrently by another sweeper is not returned twice.
    """
    now = clock.now()
    due = ConfirmationRequest.objects.filter(status__in=UNDECIDED, expires_at__lte=now)
    if request_ids is not None:
        due = due.filter(pk__in=request_ids)
    if tenant_id is not None:
        due = due.filter(tenant_id=tenant_id)
    expired: list[uuid.UUID] = []
    for request in due.order_by("expires_at")[:limit]:
        changed = ConfirmationRequest.objects.filter(pk=request.pk, status=request.status).update(
            status=Status.EXPIRED, decided_at=now, outcome_code="CONFIRMATION_EXPIRED",
            decision_reason="nobody decided before the deadline")
        if changed != 1:
            continue
        request.status = Status.EXPIRED
        events.request_expired(request, actor_id=None)
        _settle(request)
        expired.append(request.pk)
    return expired


def confirmations_expire_due(*, tenant_id: int | None = None) -> int:
    """Settle-on-read: expire what is due (of one tenant) before a page, list or run is read, so
    expiry holds within a read of the deadline even without a beat scheduler (docs/decisions.md).
    Cheap when nothing is due (one indexed SELECT). Returns how many expired."""
    if not ConfirmationRequest.objects.filter(status__in=UNDECIDED, expires_at__lte=clock.now(),
                                              **({"tenant_id": tenant_id} if tenant_id else {})).exists():
        return 0
    return len(confirmations_expire(tenant_id=tenant_id))


@transaction.atomic
def confirmations_cancel_for_run(*, run_id: uuid.UUID, actor_id: int | None, reason: str) -> list[uuid.UUID]:
    """Cancel every open request (PENDING or CONFIRMED) of a run that is being cancelled or has
    ended: CANCELLED with the reason, audited (status RUN_ENDED). No settle signal: the run is not
    resumed. Returns the ids cancelled."""
    # Locked, in one order: a decision committing meanwhile is waited for, then cancelled too,
    # so no request is left CONFIRMED on a cancelled run.
    return _cancel_open(where={"run_id": run_id}, actor_id=actor_id, reason=reason, outcome="RUN_ENDED")


def _cancel_open(*, where: dict[str, Any], actor_id: int | None, reason: str, outcome: str) -> list[uuid.UUID]:
    """Cancel every open request (PENDING or CONFIRMED) matching `where`, locked in primary-key
    order, each with one conditional UPDATE (a request decided meanwhile is left as it is) and its
    CANCELLED audit row with status `outcome`. Inside the caller's transaction. Returns the ids."""
    cancelled = []
    for request in ConfirmationRequest.objects.select_for_update().filter(**where, status__in=OPEN_STATES) \
            .order_by("pk"):
        changed = ConfirmationRequest.objects.filter(pk=request.pk, status__in=OPEN_STATES).update(
            status=Status.CANCELLED, decided_at=clock.now(), decided_by=actor_id, decision_reason=reason[:500],
            outcome_code=outcome)
        if changed != 1:
            continue
        request.status = Status.CANCELLED
        events.request_cancelled(request, actor_id=actor_id, status=outcome, message=reason)
        cancelled.append(request.pk)
    return cancelled


@transaction.atomic
def confirmations_cancel_for_requester(*, user_id: int, tenant_id: int, actor_id: int | None,
                                       reason: str) -> list[uuid.UUID]:
    """Cancel every open request (PENDING or CONFIRMED) that `user_id` made in `tenant_id`: the
    requester left that tenant, so nothing they asked for there may still run (docs/roles.md,
    "Moving a user to another tenant"). CANCELLED with outcome REQUESTER_MOVED, audited, inside
    the caller's transaction; no settle signal (the mover cancels the runs too). Returns the ids."""
    return _cancel_open(where={"user_id": user_id, "tenant_id": tenant_id}, actor_id=actor_id, reason=reason,
                        outcome="REQUESTER_MOVED")


@transaction.atomic(durable=True)
def _issue_token(*, actor, request_id: uuid.UUID) -> str:
    request = (ConfirmationRequest.objects.select_for_update()
               .filter(pk=request_id, tenant_id=actor.tenant_id, user_id=actor.pk,
                       policy=ConfirmationRequest.Policy.REQUESTER).first())
    if request is None:
        raise ConfirmationNotFound("unknown confirmation request")
    _require_open(request, now=clock.now())
    raw_token = "ct_" + secrets.token_urlsafe(TOKEN_BYTES)
    request.token_hash = token_digest(raw_token)
    request.save(update_fields=["token_hash"])
    return raw_token


def confirmation_issue_token(*, request_id: uuid.UUID, user) -> str:
    """Issue a fresh token for the requester's own PENDING request, replacing (and voiding) the old.

    For calls gated while a background worker resumed the run: that token never reached the
    requester, who proves identity by session or API token instead. Returns the raw token (once).
    Raises ConfirmationNotFound (404), ConfirmationExpired (410), ConfirmationAlreadyDecided (409).
    """
    return _guarded(_issue_token, actor=user, request_id=request_id)
