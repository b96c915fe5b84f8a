"""The approver's amendments: edit and respond, the approver decisions besides approve and reject.

- **edit**: an approver replaces the arguments of a PENDING approver-gated request. The tool
  re-validates them (schema, business rules, money normalisation, precheck) through the rebinder
  that `tools.apps` registers (approvals sits below tools and never imports it); the request gets
  the new binding (arguments, hash, masked arguments, summary rebuilt by the tool, facts), its
  `revision` goes up, the quorum restarts, and the edit counts as its author's approval of what
  they wrote, never alone (`rules.quorum_reached`). Audited EDITED with both hashes. Only what
  the tool declares editable may change, never beyond what the requester asked for (an amount
  only down from theirs); anything else is refused (EDIT_NOT_ALLOWED), never sent on.
- **respond**: an approver answers with guidance instead of a decision; the request ends
  RESPONDED and the model reads the guidance as a tool message that is neither a success nor a
  rejection (code APPROVER_GUIDANCE).

Each is a top-level service: one durable transaction with its audit row, never called inside a
caller's transaction; a refusal is audited after the rollback. (The requester's withdrawal lives
in approvals.requester_actions.)
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from core import clock
from core.sql.statements import update_row
from core.redaction.text import mask_text
from approvals import signals, tracing
from approvals.approver_actions import request_for_approver
from approvals.errors import ArgumentsChanged, ConfirmationAlreadyDecided, EditInvalid, EditUnchanged, ReasonRequired
from approvals.guard import guarded
from approvals.models import Approval, ConfirmationRequest
from audit import events

Status = ConfirmationRequest.Status


@dataclass(frozen=True)
class Rebinding:
    """The new binding of an edited request, as the tool computed it from the edited arguments.

    arguments: validated, normalised parameters (JSON). masked_arguments: the same, masked.
    arguments_hash: canonical SHA-256 of `arguments`. summary: rebuilt by the tool from them.
    approval_context: facts captured now (masked), as `tools.approval_context.capture`.
    idempotency_key / business_object: the tool's, for the new arguments ("" when none).
    """

    arguments: dict[str, Any]
    masked_arguments: dict[str, Any]
    arguments_hash: str
    summary: str
    approval_context: dict[str, Any]
    idempotency_key: str
    business_object: str


Rebinder = Callable[[ConfirmationRequest, Any], Rebinding]
_rebinder: Rebinder | None = None


def register_rebinder(rebinder: Rebinder) -> None:
    """Install the function that validates edited arguments for a request's tool and returns the
    new binding, raising EditInvalid (tools.approval_edit.rebind, registered by tools.apps)."""
    global _rebinder
    _rebinder = rebinder


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"field", "from", "to"}] of the masked arguments that differ (None: not given)."""
    return [{"field": name, "from": before.get(name), "to": after.get(name)}
            for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]


def describe_changes(changes: list[dict[str, Any]]) -> str:
    """'amount: — → 50.00; reason: "a" → "b"' for people and the model (values already masked)."""
    def shown(value: Any) -> str:
        return "—" if value is None else str(value)
    return "; ".join(f"{c['field']}: {shown(c['from'])} → {shown(c['to'])}" for c in changes)


# The approver rules of approve and reject, in the words of an edit or a response.
OWN_CALL = "a requester never approves or edits their own call"


def _lock_for_approver(*, actor, request_id: uuid.UUID) -> ConfirmationRequest:
    """The request locked for an edit or a response by `actor`, with its tool, tenant and
    requester read (the rebinder needs them): `approver_actions.request_for_approver`."""
    return request_for_approver(actor=actor, request_id=request_id, own_call=OWN_CALL,
                                related=("tool", "tenant", "user"))


@transaction.atomic(durable=True)
def _edit(*, actor, request_id: uuid.UUID, arguments: Any, base_arguments_hash: str,
          comment: str) -> ConfirmationRequest:
    request = _lock_for_approver(actor=actor, request_id=request_id)
    if base_arguments_hash != request.arguments_hash:
        raise ArgumentsChanged("the arguments were changed since you read them (another approver edited "
                               "first); read the request again")
    if _rebinder is None:
        raise EditInvalid("arguments cannot be edited: no tool registry is installed")
    binding = _rebinder(request, arguments)  # raises EditInvalid; read-only
    if binding.arguments_hash == request.arguments_hash:
        raise EditUnchanged("the edited arguments are the same call as the current ones once normalised")
    comment = mask_text(comment)[:2000]
    changes = _changes(request.masked_arguments or {}, binding.masked_arguments)
    old_hash, revision = request.arguments_hash, request.revision + 1
    # The row is locked: a plain UPDATE. The first binding's hash is kept beside the new one.
    values = {"arguments": binding.arguments, "masked_arguments": binding.masked_arguments,
              "arguments_hash": binding.arguments_hash, "summary": mask_text(binding.summary)[:500],
              "approval_context": binding.approval_context, "idempotency_key": binding.idempotency_key[:128],
              "business_object": binding.business_object[:200], "revision": revision,
              "original_arguments_hash": request.original_arguments_hash or old_hash}
    update_row(ConfirmationRequest, request.pk, values)
    for name, value in values.items():
        setattr(request, name, value)
    Approval.objects.create(request=request, approver=actor, decision=Approval.Decision.EDIT, comment=comment,
                            revision=revision, arguments_hash=binding.arguments_hash, changes=changes)
    said = f"; comment: {comment[:200]}" if comment else ""
    events.request_edited(request, actor_id=actor.pk, status=f"REVISION_{revision}",
                   message=(f"{actor.get_username()} edited the arguments: {describe_changes(changes)}"[:600]
                            + f" (arguments hash {old_hash} -> {binding.arguments_hash}){said}"))
    # No confirmation here: the edit is its author's approval, never enough alone (quorum_reached).
    signals.send_revised(request, editor_id=actor.pk)
    return request


@tracing.decision("edit")
def confirmation_edit(*, request_id: uuid.UUID, editor, arguments: Any, base_arguments_hash: str,
                      comment: str = "") -> ConfirmationRequest:
    """An approver replaces the arguments of a PENDING approver-gated request.

    arguments: the complete new arguments (JSON object), validated like a model's call (schema,
    business rules, normalisation, precheck), then bound: new hash, masked arguments, summary and
    facts; `revision` + 1; decisions on earlier revisions stop counting. The edit counts as the
    editor's approval of the new revision, but the request is confirmed only with someone else's
    approval too. base_arguments_hash: the `arguments_hash` the editor saw; a stale one (someone
    edited first) is refused, so of concurrent edits exactly one wins.
    Returns the request (still PENDING). Raises ConfirmationNotFound (404), ApprovalForbidden (403),
    ConfirmationExpired (410), ConfirmationAlreadyDecided (409), ArgumentsChanged (409),
    EditInvalid (400 INVALID_ARGUMENTS with `errors`), EditNotAllowed (400 EDIT_NOT_ALLOWED with
    `errors`: an argument the tool does not let approvers change, or an amount above the
    requester's; the tool's `editable`, docs/approvals.md), EditUnchanged (400).
    """
    if not isinstance(base_arguments_hash, str) or not base_arguments_hash:
        raise EditInvalid("base_arguments_hash is required: the arguments_hash you edited",
                          errors=[{"field": "base_arguments_hash", "error": "required"}])
    return guarded(_edit, actor=editor, request_id=request_id, arguments=arguments,
                    base_arguments_hash=base_arguments_hash, comment=comment or "")


@transaction.atomic(durable=True)
def _respond(*, actor, request_id: uuid.UUID, guidance: str) -> ConfirmationRequest:
    request = _lock_for_approver(actor=actor, request_id=request_id)
    if Approval.objects.filter(request=request, approver=actor, revision=request.revision).exists():
        raise ConfirmationAlreadyDecided("you already decided this request")
    guidance = mask_text(guidance)[:2000]
    now = clock.now()
    Approval.objects.create(request=request, approver=actor, decision=Approval.Decision.RESPOND, comment=guidance,
                            revision=request.revision, arguments_hash=request.arguments_hash)
    request.status, request.decided_at, request.decided_by = Status.RESPONDED, now, actor
    request.decision_reason, request.outcome_code = guidance[:500], "RESPONDED"
    update_row(ConfirmationRequest, request.pk, {
        "status": request.status, "decided_at": now, "decided_by": actor.pk, "decision_reason": request.decision_reason,
        "outcome_code": request.outcome_code, "token_hash": None})
    events.request_responded(request, actor_id=actor.pk, message=guidance[:500])
    signals.send_settled(request)
    signals.send_ended(request, ending=signals.DECIDED, actor_id=actor.pk)
    return request


@tracing.decision("respond")
def confirmation_respond(*, request_id: uuid.UUID, approver, guidance: str) -> ConfirmationRequest:
    """An approver answers a PENDING request with guidance for the model instead of deciding it:
    the request ends RESPONDED (nothing runs), the run resumes and the model gets a tool message
    with code APPROVER_GUIDANCE (not a success, not a rejection) carrying the guidance.

    Raises ReasonRequired (400) for blank guidance; otherwise as `confirmation_approve`.
    """
    if not isinstance(guidance, str) or not guidance.strip():
        raise ReasonRequired("a response needs guidance for the assistant")
    return guarded(_respond, actor=approver, request_id=request_id, guidance=guidance.strip())
