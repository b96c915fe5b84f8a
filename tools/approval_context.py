"""The approval context of a gated call: the facts a human needs beside
the arguments, and the words the model wrote, kept apart from the platform's summary.

`capture` runs when a confirmation is requested; its masked result is stored on the
ConfirmationRequest (`approval_context`). `live_facts` recomputes the facts for an open request
when a card is shown; approvals.selectors.approval_facts calls it through the provider registered
in tools.apps (approvals sits below tools and never imports it). Both run the tool's declared
`approval_context(ctx, params)` read-only (a write statement fails closed) and tenant-scoped: the
context carries the request's tenant, never anything the model sent.
"""
from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from core import clock
from core.sql.transactions import track_writes
from tools.context import ToolContext
from tools.idempotency import ReadOnlyViolation
from core.redaction.fields import mask_mapping
from tools.registry import ToolSpec, registry

logger = logging.getLogger(__name__)


def _facts(spec: ToolSpec, ctx: ToolContext, params: Any) -> dict[str, Any]:
    """The tool's facts, masked. Raises ReadOnlyViolation when the tool's context wrote."""
    with track_writes() as writes:
        facts = spec.context(ctx, params)
    if writes.wrote:
        raise ReadOnlyViolation(f"{spec.name}: approval_context sent a statement that may change rows")
    return mask_mapping(facts)


def capture(ctx: ToolContext, spec: ToolSpec, params: Any) -> dict[str, Any]:
    """What the approvers are shown beside the arguments, as stored on the request:
    {"facts": {...} (masked; {} when the tool declares none), "written_by_assistant": {argument:
    masked text}, "captured_at": ISO 8601}."""
    return {"facts": _facts(spec, ctx, params),
            "written_by_assistant": mask_mapping(spec.assistant_text(params)),
            "captured_at": clock.now().isoformat()}


def live_facts(request) -> dict[str, Any] | None:
    """The facts of a stored request recomputed now from its stored (normalised) arguments, masked;
    None when its tool declares no context, is no longer registered, or its arguments no longer
    parse. Never raises for a business reason: a card is shown even when the facts cannot be."""
    spec = registry.get(request.tool_name)
    if spec is None or spec.approval_context is None:
        return None
    try:
        params = spec.parameters.model_validate(request.arguments)
    except ValidationError:
        return None
    ctx = ToolContext(tenant=request.tenant, user=request.user, conversation_id=request.conversation_id,
                      run_id=request.run_id)
    try:
        return _facts(spec, ctx, params)
    except ReadOnlyViolation:
        logger.error("approval context of %s wrote to the database; not shown", spec.name)
        return None
