"""Writing audit events: one function per kind of event, so each kind fills its fields the same way
wherever it is written (the decision comes from `AuditEvent.Decision`, never a string literal).

A denial must survive the rollback of the work it denied: callers write denials outside (after)
the failed transaction; no function here runs inside a caller's atomic block that is about to roll
back. Every row is appended by `_write`, the one writer of AuditEvent rows (`audit.chain`
advances the tenant's hash chain in the same statement). None of these functions opens a
transaction. Inside the caller's transaction the row is sent as its last statement, right before
its COMMIT (audit.chain.append_chained), so the tenant's chain head is locked for that statement
and the COMMIT only, and the row commits or rolls back with the caller's work; outside one it is
written at once. A failed write raises DatabaseError (from the atomic block's exit when sent at
the COMMIT, which then rolls everything back): callers treat it as "not executed" (fail closed).
"""
from __future__ import annotations

import math
import time
import uuid
from functools import partial
from typing import Any, Protocol

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from core import correlation
from core.redaction.endpoints import scrub_urls
from core.redaction.text import mask_json, mask_text
from audit import metrics
from audit.chain import CHAIN_FIELDS, append_chained
from audit.models import AuditEvent
from audit.subjects import business_object_of

Decision = AuditEvent.Decision


def _write(
    *,
    tenant_id: int,
    decision: str,
    actor_id: int | None = None,
    tool_name: str = "",
    tool_owner: str = "",
    tool_version: str = "",
    status: str = "",
    policy_decision: str = "",
    request_id: str = "",
    conversation_id: uuid.UUID | str | None = None,
    run_id: uuid.UUID | str | None = None,
    tool_call_id: str = "",
    arguments_hash: str = "",
    masked_arguments: Any = None,
    confirmation_id: uuid.UUID | str | None = None,
    idempotency_key: str = "",
    business_result_id: str = "",
    duration_ms: float | None = None,
    message: str = "",
    execution: dict[str, Any] | None = None,
    policy_version: int | None = None, policy_rules: list[str] | tuple[str, ...] | None = None,
    channel: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one AuditEvent (audit.chain.append_chained: on PostgreSQL one statement with the
    chain advance, sent right before the COMMIT of the transaction open now, or at once outside
    one) and count it in the metrics; return the event. Its `chain_seq`, `prev_hash` and
    `row_hash` are set once the row is written: None / "" until its transaction commits.

    `tool_owner` / `tool_version`: the tool's owner and version when the call was decided, "" when
    the call named no known tool. `masked_arguments` must already be masked (core.redaction.fields);
    every string in it and `message` go through core.redaction.text once more (cards, ids, phones,
    tokens), `message` also through core.redaction.endpoints.scrub_urls; never pass a raw token.
    `execution`: on an execution's rows, which process ran it under which run lease ({"holder":
    "host:pid", "lease": ISO 8601 or None}). `policy_version` / `policy_rules`: the bundle version
    and the rules and limits that set the call's gate (docs/policy.md). `channel`: how a call arrived
    when not through the platform's own loop (tools.context.ToolContext.channel: MCP and the API
    key's name), hashed with the row. Raises DatabaseError.
    """
    event = AuditEvent(
        tenant_id=tenant_id,
        actor_id=actor_id,
        decision=decision,
        tool_name=tool_name,
        tool_owner=tool_owner[:200],
        tool_version=tool_version[:64],
        status=status,
        policy_decision=policy_decision,
        # The HTTP request that produced this row when the caller did not name one.
        request_id=(request_id or correlation.request_id())[:64],
        conversation_id=conversation_id,
        run_id=run_id,
        tool_call_id=tool_call_id[:128],
        arguments_hash=arguments_hash,
        masked_arguments=mask_json(masked_arguments),
        confirmation_id=confirmation_id,
        idempotency_key=idempotency_key,
        business_result_id=business_result_id[:128],
        duration_ms=duration_ms,
        message=scrub_urls(mask_text(message))[:500],
        execution=execution,
        policy_version=policy_version, policy_rules=list(policy_rules) if policy_rules else None,
        channel=channel or None,
    )
    event.business_object = business_object_of(decision=decision, masked_arguments=event.masked_arguments)
    event.occurred_at = timezone.now()  # what auto_now_add would set
    append_chained({f.attname: getattr(event, f.attname) for f in AuditEvent._meta.concrete_fields
                    if f.attname not in CHAIN_FIELDS}, stored=partial(_chained, event))
    event._state.adding = False  # stored (or to be, with its transaction): a later save() is refused
    metrics.audit_decision(tool_name=tool_name or "-", decision=decision, status=status or "-", tenant_id=tenant_id)
    return event


def _chained(event: AuditEvent, link: tuple[int, str, str]) -> None:
    """Set the chain columns of `event` once its row is written."""
    event.chain_seq, event.prev_hash, event.row_hash = link


def record_sampled(*, group: str, tenant_id: int, message: str, **fields: Any) -> AuditEvent | None:
    """Write the 1st, 10th, 100th, ... event of `group` in the current AUDIT_REFUSAL_WINDOW_SECONDS
    window, with the running count in the message; return the row written, or None.

    For refusals an attacker can repeat at will (300 random confirmation tokens must not leave 300
    rows): the first attempt and the order of magnitude of the rest stay visible (the signal), the
    trail does not grow with the attack. Counts live in the Django cache (per process by default;
    shared with CACHE_URL). group: what is counted together, e.g. "invalid-token:<tenant>:<user>". Other fields: `_write`.
    """
    window = settings.AUDIT_REFUSAL_WINDOW_SECONDS
    key = f"audit-sample:{group}:{int(time.time() // window)}"
    cache.add(key, 0, timeout=window * 2)
    try:
        count = cache.incr(key)
    except ValueError:  # evicted between add and incr
        cache.set(key, 1, timeout=window * 2)
        count = 1
    if count != 10 ** int(math.log10(count)):
        return None
    suffix = "" if count == 1 else f" ({count} such refusals in this {window}-second window)"
    return _write(tenant_id=tenant_id, message=(message[:450] + suffix), **fields)


# --- Tool calls -------------------------------------------------------------------------------

def tool_call_decided(*, decision: str, **fields: Any) -> AuditEvent:
    """One row of the governed tool-call pipeline (tools.manager), decided as it learns the call's
    fate (ALLOWED, EXECUTED, FAILED, IDEMPOTENT_HIT, DENIED, INVALID, NOT_FOUND, CONFIRMATION_REQUIRED,
    EXPIRED, REFUSED): one of `AuditEvent.Decision` (ValueError otherwise); fields as `_write`."""
    return _write(decision=Decision(decision), **fields)


def tool_call_invalid(*, tenant_id: int, actor_id: int | None, tool_name: str, status: str, request_id: str,
                      conversation_id: uuid.UUID | str | None, run_id: uuid.UUID | str | None, tool_call_id: str,
                      message: str) -> AuditEvent:
    """INVALID: a call of the model's turn that was refused before the pipeline saw it (the turn
    was cut off or asked for too many calls). Returns the row."""
    return _write(tenant_id=tenant_id, actor_id=actor_id, decision=Decision.INVALID, tool_name=tool_name,
                  status=status, request_id=request_id, conversation_id=conversation_id, run_id=run_id,
                  tool_call_id=tool_call_id, message=message)


def idempotency_record_recovered(*, tenant_id: int, tool_name: str, status: str, arguments_hash: str,
                                 idempotency_key: str, message: str) -> AuditEvent:
    """RECOVERED: a claimed execution whose worker died was marked OUTCOME_UNKNOWN (`status`).
    Returns the row."""
    return _write(tenant_id=tenant_id, decision=Decision.RECOVERED, tool_name=tool_name, status=status,
                  arguments_hash=arguments_hash, idempotency_key=idempotency_key, message=message)


# --- Runs -------------------------------------------------------------------------------------

def run_recovered(*, tenant_id: int, status: str, request_id: str, conversation_id: uuid.UUID | str | None,
                  run_id: uuid.UUID | str, message: str) -> AuditEvent:
    """RECOVERED: a run past its lease was continued (status RESUMED) or failed (RUN_LEASE_EXPIRED).
    Returns the row."""
    return _write(tenant_id=tenant_id, decision=Decision.RECOVERED, status=status, request_id=request_id,
                  conversation_id=conversation_id, run_id=run_id, message=message)


def run_cancelled(*, tenant_id: int, actor_id: int | None, status: str, request_id: str,
                  conversation_id: uuid.UUID | str | None, run_id: uuid.UUID | str, message: str) -> AuditEvent:
    """CANCELLED: a run was cancelled (status RUN_CANCELLED); `message` says why. Returns the row."""
    return _write(tenant_id=tenant_id, actor_id=actor_id, decision=Decision.CANCELLED, status=status,
                  request_id=request_id, conversation_id=conversation_id, run_id=run_id, message=message)


# --- Confirmation requests (approvals) --------------------------------------------------------

class DecidedRequest(Protocol):
    """What a request event reads of a confirmation request (approvals.models.ConfirmationRequest)."""

    id: Any
    tenant_id: int
    tool_name: str
    status: str
    policy: str
    conversation_id: Any
    run_id: Any
    tool_call_id: str
    arguments_hash: str
    masked_arguments: Any


def _request_event(decision: str, request: DecidedRequest, *, actor_id: int | None, status: str = "",
                   message: str = "") -> AuditEvent:
    """A row about one confirmation request: its binding, policy and masked arguments; `status`
    defaults to the request's status."""
    return _write(
        tenant_id=request.tenant_id,
        actor_id=actor_id,
        decision=decision,
        tool_name=request.tool_name,
        status=status or request.status,
        policy_decision=request.policy,
        conversation_id=request.conversation_id,
        run_id=request.run_id,
        tool_call_id=request.tool_call_id,
        arguments_hash=request.arguments_hash,
        masked_arguments=request.masked_arguments,
        confirmation_id=request.id,
        message=message,
        # Read only when loaded (a request read with .only() does not cost a query here).
        policy_version=vars(request).get("policy_version"), policy_rules=vars(request).get("policy_rules"),
    )


def request_confirmed(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                      message: str = "") -> AuditEvent:
    """CONFIRMED: the requester confirmed the call with its token. Returns the row."""
    return _request_event(Decision.CONFIRMED, request, actor_id=actor_id, status=status, message=message)


def request_approved(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                     message: str = "") -> AuditEvent:
    """APPROVED: an approver approved (the request is CONFIRMED once its quorum is reached).
    Returns the row."""
    return _request_event(Decision.APPROVED, request, actor_id=actor_id, status=status, message=message)


def request_rejected(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                     message: str = "") -> AuditEvent:
    """REJECTED: an approver rejected the request. Returns the row."""
    return _request_event(Decision.REJECTED, request, actor_id=actor_id, status=status, message=message)


def request_regated(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                    message: str = "") -> AuditEvent:
    """CONFIRMATION_REQUIRED (status REGATED): a decided request waits again because the policy in
    force became stricter; `message` says what it needs now. Returns the row."""
    return _request_event(Decision.CONFIRMATION_REQUIRED, request, actor_id=actor_id, status=status,
                          message=message)


def request_refused(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                    message: str = "") -> AuditEvent:
    """REFUSED: a decision on the request, or its consumption, was refused (`status`: the error
    code). Returns the row."""
    return _request_event(Decision.REFUSED, request, actor_id=actor_id, status=status, message=message)


def request_cancelled(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                      message: str = "") -> AuditEvent:
    """CANCELLED: the requester declined, a newer request superseded it (status SUPERSEDED), or its
    run or requester went away (`status`: the outcome). Returns the row."""
    return _request_event(Decision.CANCELLED, request, actor_id=actor_id, status=status, message=message)


def request_expired(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                    message: str = "") -> AuditEvent:
    """EXPIRED: nobody decided before the deadline. Returns the row."""
    return _request_event(Decision.EXPIRED, request, actor_id=actor_id, status=status, message=message)


def request_edited(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                   message: str = "") -> AuditEvent:
    """EDITED: an approver edited the arguments (status REVISION_<n>, old -> new hash in the
    message). Returns the row."""
    return _request_event(Decision.EDITED, request, actor_id=actor_id, status=status, message=message)


def request_responded(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                      message: str = "") -> AuditEvent:
    """RESPONDED: an approver answered with guidance for the model instead of deciding. Returns the row."""
    return _request_event(Decision.RESPONDED, request, actor_id=actor_id, status=status, message=message)


def request_withdrawn(request: DecidedRequest, *, actor_id: int | None, status: str = "",
                      message: str = "") -> AuditEvent:
    """WITHDRAWN: the requester withdrew the request. Returns the row."""
    return _request_event(Decision.WITHDRAWN, request, actor_id=actor_id, status=status, message=message)


def unknown_request_refused(*, group: str, tenant_id: int, actor_id: int | None, status: str,
                            message: str) -> AuditEvent | None:
    """REFUSED, sampled (`record_sampled`): a decision named an id or token that matches no request
    of the tenant, which anyone can try at will. Returns the row written, or None."""
    return record_sampled(group=group, tenant_id=tenant_id, actor_id=actor_id, decision=Decision.REFUSED,
                          status=status, message=message)


# --- Control plane ----------------------------------------------------------------------------

def control_change_recorded(*, tenant_id: int, status: str, masked_arguments: Any, message: str,
                            actor_id: int | None = None, tool_name: str = "", tool_owner: str = "",
                            tool_version: str = "") -> AuditEvent:
    """CONTROL_CHANGE: a change of the control plane (whitelist, overrides, grants, members, roles,
    groups, API keys, remote tools, tenant moves); `status` CREATED / CHANGED / DELETED, the object
    and its old -> new values in `masked_arguments`. Returns the row."""
    return _write(tenant_id=tenant_id, decision=Decision.CONTROL_CHANGE, status=status, actor_id=actor_id,
                  tool_name=tool_name, tool_owner=tool_owner, tool_version=tool_version,
                  masked_arguments=masked_arguments, message=message)


def api_key_refused(*, tenant_id: int, status: str, actor_id: int | None, masked_arguments: Any,
                    message: str) -> AuditEvent:
    """REFUSED: issuing an API key to its owner was refused to the actor (`status`: the error code).
    Returns the row."""
    return _write(tenant_id=tenant_id, decision=Decision.REFUSED, status=status, actor_id=actor_id,
                  masked_arguments=masked_arguments, message=message)


def retention_applied(*, tenant_id: int, details: dict[str, Any], message: str) -> AuditEvent:
    """CONTROL_CHANGE (status DELETED, object type "retention"): a retention run archived and
    deleted records of the tenant. `details`: {"object": {"type": "retention", "id": run id},
    "settings": the days applied, "archives": [{kind, path, sha256, rows, first_seq, last_seq}],
    "deleted": {class: rows}}. The actor is the platform (no user). Returns the row."""
    return _write(tenant_id=tenant_id, decision=Decision.CONTROL_CHANGE, status="DELETED",
                  masked_arguments=details, message=message)
