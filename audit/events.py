"""Writing audit events. One function for every call site, so fields stay consistent.

A denial must survive the rollback of the work it denied (STYLE rule 3): callers write
denials outside (after) the failed transaction; `record()` never runs inside a caller's
atomic block that is about to roll back.
"""
from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from agentplatform import correlation
from agentplatform.redaction import mask_json, mask_text
from audit import metrics
from audit.chain import CHAIN_FIELDS, insert_chained
from audit.models import AuditEvent


def record(
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
) -> AuditEvent:
    """Append one AuditEvent and count it in the metrics.

    `tool_owner` / `tool_version`: the tool's owner and version (seed 002 section 38), "" when the
    call named no known tool. `masked_arguments` must already be masked (tools.masking); every string in it and `message`
    go through agentplatform.redaction once more (free text: cards, ids, phones, tokens); a raw token must never be
    passed in any field. Returns the stored event. Raises DatabaseError if the write fails;
    callers treat a failed audit write as "not executed" (fail closed, DESIGN section 9).
    `execution`: on the rows of an execution, which process ran it under which run lease
    ({"holder": "host:pid", "lease": ISO 8601 or None}, see AuditEvent.execution).
    The row is written by `audit.chain.insert_chained` (on PostgreSQL one statement that also
    advances the tenant's hash chain, no ORM compile: it is on every governed call). The tenant's
    chain head stays locked until the caller's transaction ends.
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
        # The HTTP request that produced this row when the caller did not name one (issue 12 item 7).
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
        message=mask_text(message)[:500],
        execution=execution,
    )
    event.occurred_at = timezone.now()  # what auto_now_add would set
    event.chain_seq, event.prev_hash, event.row_hash = insert_chained(
        {f.attname: getattr(event, f.attname) for f in AuditEvent._meta.concrete_fields if f.attname not in CHAIN_FIELDS})
    event._state.adding = False  # stored: a later save() is refused as for any read row
    metrics.audit_decision(tool_name=tool_name or "-", decision=decision, status=status or "-", tenant_id=tenant_id)
    return event


def record_sampled(*, group: str, tenant_id: int, message: str, **fields: Any) -> AuditEvent | None:
    """Record the 1st, 10th, 100th, ... event of `group` in the current AUDIT_REFUSAL_WINDOW_SECONDS
    window, with the running count in the message; return the row written, or None.

    For refusals an attacker can repeat at will (300 random confirmation tokens must not leave 300
    rows, issue 9 item 8): the first attempt and the order of magnitude of the rest stay visible
    (the signal), the trail does not grow with the attack. Counts live in the Django cache (per
    process by default, so each process writes its own samples; shared with CACHE_URL).
    group: what is counted together, e.g. "invalid-token:<tenant>:<user>". Other fields: record().
    """
    import math
    import time

    from django.conf import settings
    from django.core.cache import cache

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
    return record(tenant_id=tenant_id, message=(message[:450] + suffix), **fields)
