"""An approver's edit of a gated call, checked the way a model's call is (issue 13 item 3).

`rebind(request, arguments)` runs the edited arguments through the pipeline's checks for the
request's tool (DESIGN section 4 steps 2-4, the tool's normalisation and its read-only precheck)
with the requester's server-side context, and returns the new binding: normalised arguments, their
hash (so "50" and "50.00" bind the same call), masked arguments, the summary the tool rebuilds
from them, and the facts captured now. approvals.amendments calls it through the rebinder that
tools.apps registers (approvals sits below tools).
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from pydantic import ValidationError

from agentplatform.text import unstorable_reason
from approvals.amendments import Rebinding
from approvals.errors import EditInvalid
from tools import approval_context
from tools.context import ToolContext
from tools.errors import ToolBusinessError, ToolValidationError
from tools.hashing import arguments_hash
from tools.masking import mask_mapping
from tools.money import MoneyInvalid
from tools.registry import registry


def _field_errors(error: ValidationError) -> list[dict[str, str]]:
    # As the pipeline's: input values are left out (they may be huge or sensitive).
    return [{"field": ".".join(str(p) for p in e["loc"]) or "(root)", "error": e["msg"]}
            for e in error.errors(include_url=False, include_input=False)][:20]


def rebind(request, arguments: Any) -> Rebinding:
    """The binding of `request` (a ConfirmationRequest, its tool, tenant and requester loaded) with
    `arguments` (the complete edited arguments, a JSON object).

    Checked in the pipeline's order: a JSON object within TOOLS_MAX_ARGUMENT_BYTES that PostgreSQL
    can store, the tool's parameter model (extra="forbid"), its business rules, its normalisation
    (money in the currency's minor unit), and its precheck (read-only) in the requester's tenant.
    Raises EditInvalid (INVALID_ARGUMENTS) with `errors` [{"field", "error", "code"?}]; a precheck
    refusal carries the business code (e.g. REFUND_EXCEEDS_AMOUNT) in `errors[0].code`.
    """
    spec = registry.get(request.tool_name)
    if spec is None:
        raise EditInvalid(f"the tool {request.tool_name} is no longer registered; it cannot be edited",
                          errors=[{"field": "(tool)", "error": "not registered", "code": "TOOL_NOT_FOUND"}])
    if not isinstance(arguments, dict):
        raise EditInvalid("arguments must be a JSON object", errors=[{"field": "arguments", "error": "not an object"}])
    if len(json.dumps(arguments, ensure_ascii=False).encode("utf-8")) > settings.TOOLS_MAX_ARGUMENT_BYTES:
        raise EditInvalid(f"arguments exceed {settings.TOOLS_MAX_ARGUMENT_BYTES} bytes",
                          errors=[{"field": "arguments", "error": "too large"}])
    unstorable = unstorable_reason(arguments)
    if unstorable:
        raise EditInvalid(f"arguments {unstorable}, which cannot be processed",
                          errors=[{"field": "arguments", "error": unstorable}])
    try:
        params = spec.parameters.model_validate(arguments)
    except ValidationError as exc:
        raise EditInvalid("arguments do not match the tool's schema", errors=_field_errors(exc)) from None
    ctx = ToolContext(tenant=request.tenant, user=request.user, conversation_id=request.conversation_id,
                      run_id=request.run_id)
    try:
        if spec.validate is not None:
            spec.validate(params)
        if spec.normalize is not None:
            params = spec.normalize(ctx, params)
    except MoneyInvalid as exc:
        raise EditInvalid(exc.message, errors=[{"field": exc.field, "error": exc.message, "code": exc.reason}]) \
            from None
    except ToolValidationError as exc:
        raise EditInvalid(exc.message, errors=[{"field": "(arguments)", "error": exc.message}]) from None
    if spec.precheck is not None:
        try:
            spec.precheck(ctx, params)
        except ToolBusinessError as error:
            raise EditInvalid(error.message, errors=[{"field": "(precheck)", "error": error.message,
                                                      "code": error.code}]) from None
    normalized = params.model_dump(mode="json")
    shown = approval_context.capture(ctx, spec, params)  # read-only, tenant-scoped, masked
    key = spec.idempotency_key(ctx, params) if spec.idempotency_key else None
    return Rebinding(arguments=normalized, masked_arguments=mask_mapping(normalized),
                     arguments_hash=arguments_hash(normalized), summary=spec.summary(params, shown["facts"]),
                     approval_context=shown, idempotency_key=key or "",
                     business_object=spec.business_object(params) if spec.business_object else "")
