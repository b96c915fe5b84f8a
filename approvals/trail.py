"""The audit rows of confirmation requests: one per decision, refusal or platform ending.

A decision's row is written inside the transaction that made the decision; a refusal's row after
that transaction rolled back, so the denial survives the rollback of the work it denied. Modules
call these through the module (`trail.audit_request(...)`), so a test can replace one in one place.
"""
from __future__ import annotations

import uuid

from agentplatform.errors import DomainError
from approvals.models import ConfirmationRequest
from audit import events


def audit_request(request: ConfirmationRequest, *, decision: str, actor_id: int | None, status: str = "",
                  message: str = "") -> None:
    """Append the audit row of `decision` on `request` by `actor_id` (None: the platform). status:
    the row's status ("" = the request's); message: what people read. Inside the caller's transaction."""
    events.record(
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
    )


def audit_refusal(*, actor, error: DomainError, request_id: uuid.UUID | None = None) -> None:
    """Audit a refused decision after its transaction rolled back. Unknown ids carry no tool."""
    request = None
    if request_id is not None and actor.tenant_id is not None:
        request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=actor.tenant_id).first()
    if request is not None:
        audit_request(request, decision="REFUSED", actor_id=actor.pk, status=error.code, message=error.message)
    elif actor.tenant_id is not None:
        # An unknown id or token can be tried at will: sampled, not one row per attempt.
        events.record_sampled(group=f"refused:{actor.tenant_id}:{actor.pk}:{error.code}", tenant_id=actor.tenant_id,
                              actor_id=actor.pk, decision="REFUSED", status=error.code, message=error.message)
