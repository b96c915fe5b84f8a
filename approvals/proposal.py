"""Proposal: a gated call becomes a PENDING confirmation request, and a newer request for the same
business action supersedes the older ones.

Both run inside the caller's transaction (the run's step that proposed the call): the request, the
superseded ones and their audit rows commit with the step or not at all.
"""
from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.db import transaction

from core import clock, tokens
from core.sql.select import select_rows
from core.sql.statements import insert_instance, update_row
from core.redaction.text import mask_text
from approvals import signals
from approvals.models import ConfirmationRequest
from approvals.requester_actions import TOKEN_PREFIX
from audit import events

Status = ConfirmationRequest.Status


@transaction.atomic(savepoint=False)  # inside the run's step: one transaction, no savepoint to release
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
    policy_version: int | None = None,
    policy_rules: list[str] | tuple[str, ...] = (),
) -> tuple[ConfirmationRequest, str | None]:
    """Create a PENDING request for one gated call; older open requests for the same business
    action (same idempotency key, or same declared business object) become SUPERSEDED.

    Returns (request, raw_token). The raw token (256 random bits, url-safe) exists only for
    requester-confirmed calls and is returned once; only its SHA-256 is stored. Approver-gated
    requests return None as the token. approval_context: the tool's facts and the assistant's
    free text, already masked by the caller (approvals.selectors.approval_facts reads it).
    policy_version / policy_rules: the tenant's policy bundle version and the ids of the rules and
    limits that set the gate (docs/policy.md); None / empty when the registry's policy decided.
    """
    raw_token = None
    digest = None
    if policy == ConfirmationRequest.Policy.REQUESTER:
        raw_token, digest = tokens.mint(prefix=TOKEN_PREFIX)
    # A prebuilt INSERT (core.sql.statements.insert_instance; no save() override, no signal receiver).
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
        policy_version=policy_version,
        policy_rules=list(policy_rules) or None,
    ))
    replaced = confirmations_supersede(request=request)
    signals.send_approvers_needed(request, replaces=replaced)
    return request, raw_token


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
    # A prebuilt statement: every gated call creates a request, so this read is on the hot path.
    # Sorted here, not by the database: an ORDER BY created_at lets the planner walk the requester's
    # whole history in the list index's order instead of reading their few open rows
    # (request_requester_open, a partial index: the statuses are written into the statement so a
    # prepared statement's generic plan can use it too).
    older = sorted(select_rows(ConfirmationRequest, {"tenant_id": request.tenant_id, "user_id": request.user_id,
                                                     "tool_name": request.tool_name,
                                                     "status__in_literal": ConfirmationRequest.NOT_YET_RUN},
                               any_of=same),
                   key=lambda row: (row.created_at, str(row.pk)))
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
        signals.send_settled(old)
        signals.send_ended(old, ending=signals.SUPERSEDED, replaced_by=request.pk)
        superseded.append(old.pk)
    return superseded
