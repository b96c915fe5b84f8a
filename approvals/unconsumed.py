"""What becomes of a CONFIRMED request the executing transaction could not consume: sent back to
approvers under a stricter policy (regate), refused, or spent on an attempt that raised.

Each runs after the consuming savepoint rolled back, inside the run's step transaction (each
opens a savepoint of its own when nested, and its own transaction otherwise); the request is
matched by its binding, so a call bound elsewhere never ends another's request.
"""
from __future__ import annotations

import datetime
import uuid

from django.db import transaction

from core import clock
from core.sql.statements import update_row
from core.redaction.text import mask_text
from approvals import signals
from approvals.binding import CallBinding
from approvals.errors import Regate
from approvals.models import ConfirmationRequest
from audit import events

Status = ConfirmationRequest.Status


@transaction.atomic  # within the run's step, after the consuming savepoint rolled back
def confirmation_regate(*, request_id: uuid.UUID, regate: Regate) -> ConfirmationRequest | None:
    """Put a CONFIRMED request back to PENDING under the stricter policy in force (new policy,
    quorum and risk, a fresh TTL, the requester's token void; approvals that still stand keep
    counting). Audited as CONFIRMATION_REQUIRED with status REGATED and the reason.

    Returns the request, or None when it was no longer CONFIRMED (another consumer got there).
    """
    now = clock.now()
    # The bundle rules that require more now replace those the request was asked under.
    ruled = {"policy_version": regate.policy_version, "policy_rules": list(regate.policy_rules)} \
        if regate.policy_rules else {}
    changed = ConfirmationRequest.objects.filter(pk=request_id, status=Status.CONFIRMED).update(
        status=Status.PENDING, policy=regate.policy, quorum=regate.quorum, risk=regate.risk, token_hash=None,
        confirmed_at=None, decided_at=None, decided_by=None,
        expires_at=now + datetime.timedelta(seconds=regate.ttl_seconds), decision_reason=mask_text(regate.told())[:500],
        **ruled,
    )
    if changed != 1:
        return None
    request = ConfirmationRequest.objects.get(pk=request_id)
    events.request_regated(request, actor_id=None, status="REGATED",
                   message=regate.told())
    signals.send_approvers_needed(request, again=True)
    return request


@transaction.atomic  # within the run's step, after the consuming savepoint rolled back
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
    binding = CallBinding(tenant_id=tenant_id, user_id=user_id, conversation_id=conversation_id,
                          tool_name=tool_name, arguments_hash=arguments_hash).where()
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
    binding = CallBinding(tenant_id=tenant_id, user_id=user_id, conversation_id=conversation_id,
                          tool_name=tool_name, arguments_hash=arguments_hash).where()
    return update_row(ConfirmationRequest, request_id, {"status": Status.CONSUMED, "consumed_at": now,
                                                         "outcome_code": str(code)[:64]},
                      where={"status": Status.CONFIRMED, **binding}) == 1
