"""The audit row of a refused decision on a confirmation request.

A decision's row is written inside the transaction that made the decision (audit.events.request_*);
a refusal's row after that transaction rolled back, so the denial survives the rollback of the work
it denied.
"""
from __future__ import annotations

import uuid

from core.errors import DomainError
from approvals.models import ConfirmationRequest
from audit import events


def audit_refusal(*, actor, error: DomainError, request_id: uuid.UUID | None = None) -> None:
    """Audit a refused decision after its transaction rolled back. Unknown ids carry no tool."""
    request = None
    if request_id is not None and actor.tenant_id is not None:
        request = ConfirmationRequest.objects.filter(pk=request_id, tenant_id=actor.tenant_id).first()
    if request is not None:
        events.request_refused(request, actor_id=actor.pk, status=error.code, message=error.message)
    elif actor.tenant_id is not None:
        # An unknown id or token can be tried at will: sampled, not one row per attempt.
        events.unknown_request_refused(group=f"refused:{actor.tenant_id}:{actor.pk}:{error.code}",
                                       tenant_id=actor.tenant_id, actor_id=actor.pk, status=error.code,
                                       message=error.message)
