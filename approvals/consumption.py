"""Consumption: the executing transaction spends a CONFIRMED request on exactly the call it is bound
to, and checks that the decision still satisfies the policy in force.

Both functions must run inside the caller's transaction that executes the call, so consumption and
side effect commit (or roll back) together; `confirmation_consume` asserts it. What becomes of a
request that could not be consumed is approvals.unconsumed, after that transaction rolled back.
"""
from __future__ import annotations

import uuid

from django.db import transaction

from core import clock
from core.sql.statements import update_row
from approvals import rules
from approvals.binding import CallBinding
from approvals.errors import (
    ConfirmationExpired,
    ConfirmationNotConsumable,
    ConfirmationRegated,
    ConsumeRefused,
    Regate,
)
from approvals.models import ConfirmationRequest
from approvals.presentation import regate_reason

Status = ConfirmationRequest.Status
Policy = ConfirmationRequest.Policy


def assert_in_transaction() -> None:
    """Fail loudly when called outside a transaction: a consumption that commits on its own could
    spend a decision on a call whose side effect then rolls back."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("confirmation_consume must run inside the transaction that executes the call")


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
    policy_version: int | None = None,
    policy_rules: tuple[str, ...] | list[str] = (),
) -> int:
    """Consume a CONFIRMED request with one compare-and-set, then check that the
    decision it carries satisfies the policy in force now. Call inside the transaction that
    executes the call, so consumption and side effect commit (or roll back) together.

    policy / quorum / risk / ttl_seconds: the tool's effective policy now (tools.policy).
    Decisions are evaluated again here (docs/decisions.md): a policy that
    became stricter (REQUESTER -> APPROVERS, a higher quorum, an approver who lost
    `approve_tool`) raises ConfirmationRegated; DENY raises ConsumeRefused(POLICY_DENIED). A
    looser policy keeps what was already asked. A CONFIRMED request does not expire.
    policy_version / policy_rules: the tenant's policy bundle version now and the rules that set
    the gate now (tools.gate); a regate names them to the requester and records them on the request.

    Returns the consumed request's revision (0: its arguments were never edited). Raises
    ConfirmationExpired when the request expired undecided, or
    ConfirmationNotConsumable (code CONFIRMATION_INVALID) for any binding mismatch, a replay, or a
    request that is not CONFIRMED; ConfirmationRegated, ConsumeRefused as above.
    """
    assert_in_transaction()
    now = clock.now()
    binding = CallBinding(tenant_id=tenant_id, user_id=user_id, conversation_id=conversation_id,
                          tool_name=tool_name, arguments_hash=arguments_hash)
    # One compare-and-set that also returns what the re-evaluation below needs (no second read).
    consumed = update_row(
        ConfirmationRequest, request_id, {"status": Status.CONSUMED, "consumed_at": now},
        where={"status": Status.CONFIRMED, **binding.exact_where()},
        returning=("policy", "quorum", "tool", "revision", "created_at"))
    if consumed is None:
        request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=tenant_id).first()
        if request is not None and request.is_expired_at(now):
            raise ConfirmationExpired("the confirmation expired before it was used")
        raise ConfirmationNotConsumable("no consumable confirmation for exactly this call")
    if policy == "DENY":
        raise ConsumeRefused(f"the policy of {tool_name} now denies every call", code="POLICY_DENIED")
    stored = ConfirmationRequest(pk=request_id, tenant_id=tenant_id, user_id=user_id, policy=consumed["policy"],
                                 quorum=consumed["quorum"], tool_id=consumed["tool_id"],  # tool: read if needed
                                 revision=consumed["revision"], created_at=consumed["created_at"])
    needed_policy, needed_quorum = rules.required_policy(stored, policy=policy, quorum=quorum)
    if needed_policy != Policy.APPROVERS:
        return stored.revision
    standing = rules.standing_approvals(stored) if stored.policy == Policy.APPROVERS else []
    if rules.quorum_reached(standing, quorum=needed_quorum, revision=stored.revision):
        return stored.revision
    counted = len(standing)
    cause = rules.regate_cause(stored, needed_quorum=needed_quorum)
    reason, reason_zh = regate_reason(cause=cause, tool=tool_name, quorum=needed_quorum, counted=counted, risk=risk)
    ruled = policy == Policy.APPROVERS and quorum == needed_quorum and bool(policy_rules)
    if ruled:  # the bundle's rules set what is needed now: name them, in words
        names = ", ".join(policy_rules)
        reason, reason_zh = f"{reason} (policy rule {names})", f"{reason_zh}（策略规则 {names}）"
    raise ConfirmationRegated(Regate(policy=Policy.APPROVERS, quorum=needed_quorum, risk=risk, ttl_seconds=ttl_seconds,
                                     reason=reason, reason_zh=reason_zh, cause=cause, counted=counted,
                                     policy_version=policy_version,
                                     policy_rules=tuple(policy_rules) if ruled else ()))


def confirmation_record_outcome(*, request_id: uuid.UUID, code: str) -> None:
    """Store what happened when a request was consumed (OK, a business failure code,
    IDEMPOTENT_HIT). Call inside the consuming transaction; one UPDATE."""
    update_row(ConfirmationRequest, request_id, {"outcome_code": code[:64]})
