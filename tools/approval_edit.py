"""An approver's edit of a gated call, checked the way a model's call is.

`rebind(request, arguments)` runs the edited arguments through the pipeline's checks for the
request's tool (parse, schema, the tool's rules and normalisation, and its read-only precheck)
with the requester's server-side context, and returns the new binding: normalised arguments, their
hash (so "50" and "50.00" bind the same call), masked arguments, the summary the tool rebuilds
from them, and the facts captured now. approvals.amendments calls it through the rebinder that
tools.apps registers (approvals sits below tools).
"""
from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from pydantic import ValidationError

from core.text import unstorable_reason
from approvals.amendments import Rebinding
from approvals.errors import EditInvalid, EditNotAllowed
from tools import approval_context
from tools.context import ToolContext
from tools.errors import ToolBusinessError, ToolValidationError
from tools.hashing import arguments_hash
from core.redaction.fields import mask_mapping
from tools.money import MoneyInvalid, minor_units
from tools.registry import EditRule, ToolSpec, registry

# Where the requester's values of the arguments an approver may only lower are kept, beside the
# facts in ConfirmationRequest.approval_context: {argument: value as the requester asked}.
EDIT_BOUNDS = "edit_bounds"


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
    Then the scope (`ToolSpec.editable`): an argument the tool does not declare must keep its
    value, a DECREASE_ONLY one may not exceed the requester's (revision 0) value.
    Raises EditInvalid (INVALID_ARGUMENTS) with `errors` [{"field", "error", "code"?}]; a precheck
    refusal carries the business code (e.g. REFUND_EXCEEDS_AMOUNT) in `errors[0].code`.
    Raises EditNotAllowed (EDIT_NOT_ALLOWED) with one error per field out of scope (code
    NOT_EDITABLE or ABOVE_REQUESTED).
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
    # Within the request before anything else is read for it: an edit that retargets the call is
    # refused as such, not with the other order's facts.
    bounds = _requested_bounds(spec, request)
    _check_scope(spec, ctx, params, current=request.arguments or {}, bounds=bounds)
    if spec.precheck is not None:
        try:
            spec.precheck(ctx, params)
        except ToolBusinessError as error:
            raise EditInvalid(error.message, errors=[{"field": "(precheck)", "error": error.message,
                                                      "code": error.code}]) from None
    normalized = params.model_dump(mode="json")
    shown = approval_context.capture(ctx, spec, params)  # read-only, tenant-scoped, masked
    if bounds:
        shown = {**shown, EDIT_BOUNDS: bounds}  # carried from edit to edit: always the requester's
    key = spec.idempotency_key(ctx, params) if spec.idempotency_key else None
    return Rebinding(arguments=normalized, masked_arguments=mask_mapping(normalized),
                     arguments_hash=arguments_hash(normalized), summary=spec.summary(params, shown["facts"]),
                     approval_context=shown, idempotency_key=key or "",
                     business_object=spec.business_object(params) if spec.business_object else "")


def _requested_bounds(spec: ToolSpec, request) -> dict[str, Any]:
    """The requester's values of `spec`'s DECREASE_ONLY arguments: from the stored arguments while
    nobody edited them (revision 0), else as kept at the first edit (EDIT_BOUNDS). A request edited
    without them kept (before edits had rules) cannot be edited again: refused, never guessed."""
    bounded = [name for name, rule in spec.editable.items() if rule == EditRule.DECREASE_ONLY]
    if not bounded:
        return {}
    if request.revision == 0:
        arguments = request.arguments or {}
        return {name: arguments.get(name) for name in bounded}
    kept = (request.approval_context or {}).get(EDIT_BOUNDS)
    if not isinstance(kept, dict) or not set(bounded) <= set(kept):
        raise EditNotAllowed(
            "the requester's original values of this request are not known, so it cannot be edited again; "
            "reject it with a reason instead / 无法确认申请人的原始参数，不能再修改，请附理由拒绝",
            errors=[{"field": name, "error": "the requester's value is not known", "code": "NOT_EDITABLE"}
                    for name in bounded])
    return {name: kept[name] for name in bounded}


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def _within(spec: ToolSpec, ctx: ToolContext, params: Any, value: Any, bound: Any) -> bool:
    """Whether `value` is at most `bound` (DECREASE_ONLY). None is "all of it": any number is
    below it, and it is above any number. Money compares in the currency's minor unit; anything
    that is not a finite number fails closed."""
    if bound is None:
        return value is None or _decimal(value) is not None
    if value is None:
        return False
    new, old = _decimal(value), _decimal(bound)
    if new is None or old is None:
        return False
    if spec.currency is not None:
        currency = spec.currency(ctx, params)
        try:
            return minor_units(new, currency) <= minor_units(old, currency)
        except MoneyInvalid:
            return False
    return new <= old


def _check_scope(spec: ToolSpec, ctx: ToolContext, params: Any, *, current: dict[str, Any],
                 bounds: dict[str, Any]) -> None:
    """Refuse an edit outside `spec.editable` (EditNotAllowed naming every such field and why).

    current: the request's stored (normalised) arguments; an argument not declared editable must
    be equal to it (it is the requester's: every earlier edit passed this check). bounds: the
    requester's values of the DECREASE_ONLY arguments (`_requested_bounds`)."""
    edited = params.model_dump(mode="json")
    errors: list[dict[str, str]] = []
    for name in sorted(set(edited) | set(current)):
        value, rule = edited.get(name), spec.editable.get(name)
        if rule is None:
            if value != current.get(name):
                errors.append({"field": name, "error": f"{name} cannot be edited", "code": "NOT_EDITABLE"})
        elif rule == EditRule.DECREASE_ONLY and not _within(spec, ctx, params, value, bounds.get(name)):
            bound = bounds.get(name)
            why = (f"{name} may only go down from {bound}, what the requester asked for" if bound is not None
                   else f"{name} may only go down from what the requester asked for")
            if value is None and bound is not None:
                why += "; leaving it out would mean all of it"
            errors.append({"field": name, "error": why, "code": "ABOVE_REQUESTED"})
    if errors:
        raise EditNotAllowed(
            "this edit goes beyond what the requester asked for (" + "; ".join(e["error"] for e in errors)
            + "); reject with a reason instead, and the requester can ask again / 修改超出了申请人的请求范围，"
            "请附理由拒绝，由申请人重新发起", errors=errors)


def edit_rules(request) -> list[dict[str, Any]]:
    """What an approver may change in `request` (a ConfirmationRequest): [{"field", "rule" (ANY or
    DECREASE_ONLY), "limit" (the requester's value a DECREASE_ONLY argument may not exceed; None:
    no limit but the tool's own)}], in the tool's declared order; [] when nothing is editable
    (every remote tool, an unregistered tool, or bounds that are no longer known)."""
    spec = registry.get(request.tool_name)
    if spec is None or not spec.editable:
        return []
    try:
        bounds = _requested_bounds(spec, request)
    except EditNotAllowed:
        return []
    return [{"field": name, "rule": str(rule), "limit": bounds.get(name) if rule == EditRule.DECREASE_ONLY else None}
            for name, rule in spec.editable.items()]
