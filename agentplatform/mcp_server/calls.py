"""Governed calls over MCP: the one service the MCP transport (agentplatform.mcp_server.server)
calls for `tools/call`, `tasks/get`, `tasks/result` and the requester's elicitation answer.

Every call runs through tools.governed_call as the API key's user, in that user's tenant, with the
key's conversation (`Principal.conversation_id`, one per key) and `ToolContext.channel` naming MCP
and the key on every audit row. A gated call is recorded as an McpCall; a later call of the same
tool with the same normalised arguments under the same key within MCP_RETRY_WINDOW_SECONDS is the
same call: "still pending" (never a second request), then the one execution once approved, then
the stored answer (docs/mcp.md). A call that ended without running (rejected, declined, expired,
withdrawn) is replayed the same way for the rest of the window: asking again needs other arguments
or the window's end, so a rejected call cannot be re-asked by repeating it.

Serialisation: every caller of one (key, tool, arguments hash) takes `pg_advisory_xact_lock` and
then the McpCall row lock (retries), so clients retrying at the same moment see one execution and
the others its stored answer; the decision itself is consumed once by the pipeline's own
compare-and-set (tools.consume), whatever the locks.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from django.db import transaction

from core import clock
from core.redaction.text import mask_text
from core.text import storable_text
from core.sql.transactions import transaction_usable
from agentplatform.mcp_server import answers, retries
from agentplatform.mcp_server.models import McpCall
from agentplatform.mcp_server.values import KEY_CONVERSATIONS, Answer, CallNotFound, Principal
from approvals import expiry, requester_actions
from approvals.errors import (
    ConfirmationAlreadyDecided,
    ConfirmationExpired,
    ConfirmationNotFound,
)
from approvals.models import ConfirmationRequest
from tools.calls import CallOutcome, ToolCall
from tools.context import ToolContext
from tools.governed_call import ArgumentsInvalid, normalized_arguments, validated_arguments
from tools.manager import ToolCallingManager
from tools.results import ToolResult

__all__ = ["KEY_CONVERSATIONS", "Answer", "CallNotFound", "Principal", "call_state", "call_tool", "requester_answer"]

Status = ConfirmationRequest.Status


def call_tool(principal: Principal, *, name: str, arguments: Any, request_id: str = "") -> Answer:
    """Run one MCP tools/call as a governed call. `arguments`: the decoded JSON arguments (any type:
    a non-object is refused INVALID_ARGUMENTS by the pipeline; None is an empty object). request_id:
    the inbound HTTP request's id for audit correlation. Returns the Answer; raises
    ToolPermissionDenied (a tool the user may not use, audited) and the system errors
    tools.execution.propagates names.

    A top-level service: opens its own transaction (never call it inside one). A call that matches
    an earlier McpCall of the same key, tool and normalised arguments within
    MCP_RETRY_WINDOW_SECONDS answers that call's state (`_advance`) instead of asking again."""
    try:
        user = retries.fresh_user(principal)
    except retries.PrincipalGone as gone:
        return answers.refused(gone.code, str(gone))
    manager = ToolCallingManager()
    ctx = _context(principal, user, request_id)
    offered = manager.offered(ctx)
    ctx = replace(ctx, offered=frozenset(offered), offered_tools=offered)
    call = ToolCall(id=retries.new_tool_call_id(), name=_tool_name(name, offered), arguments=_encoded(arguments))
    hashed = _hash(ctx, offered, call)
    if hashed is None:
        # Unknown tool, not offered, or invalid arguments: the pipeline answers (and audits) it;
        # nothing is matched or stored.
        return answers.of_outcome(manager.execute_call(ctx, call, offered))

    def locked() -> Answer:
        retries.serialise(principal, call.name, hashed)
        earlier = retries.latest(principal, call.name, hashed)
        if earlier is not None:
            return _advance(principal, user, earlier, request_id)
        retries.conversation_ensure(principal=principal, user=user)
        outcome = manager.execute_call(ctx, call, offered)
        if outcome.pending is None:
            return answers.of_outcome(outcome)
        request = ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)
        mcp = McpCall.objects.create(
            tenant_id=user.tenant_id, user=user, api_key=principal.api_key, key_name=principal.api_key.name,
            conversation_id=principal.conversation_id, tool_name=call.name, arguments_hash=hashed,
            tool_call_id=call.id, request=request, status=McpCall.Status.WAITING)
        return answers.pending(request, mcp)

    return _atomically(locked)


def call_state(principal: Principal, *, call_id: uuid.UUID) -> Answer:
    """The state of the gated call `call_id` (tasks/get, tasks/result, a retry): executes it now
    when it was approved and has not run (exactly once, whoever asks first: serialised per key,
    tool and arguments like a retry), replays its stored answer once it ended. Raises CallNotFound
    (another key's or tenant's call, or an unknown id). A top-level service (its own transaction)."""
    found = _own_call(principal, call_id)
    if isinstance(found, Answer):
        return found
    user, seen = found

    def locked() -> Answer:
        retries.serialise(principal, seen.tool_name, seen.arguments_hash)
        mcp = retries.owned(principal, seen.pk)
        if mcp is None:  # pragma: no cover - McpCall rows are never deleted
            raise CallNotFound("unknown call id")
        return _advance(principal, user, mcp, "")

    return _atomically(locked)


def requester_answer(principal: Principal, *, call_id: uuid.UUID, confirm: bool) -> Answer:
    """The requester's own answer to the confirmation of `call_id` (an elicitation form accepted
    with confirm=True, or declined): confirms and runs it (or answers pending on approvers when
    the policy in force now wants more than the requester's confirmation), or cancels the request
    (then "failed" with REJECTED, the requester declined). Raises CallNotFound; ApprovalForbidden
    (code APPROVAL_FORBIDDEN) when a service account's key confirms: a program never confirms
    for a person. A call that does not wait on its requester answers its current state.

    Not inside a transaction: the decision is the approvals app's own durable services
    (confirmation_confirm_own / confirmation_cancel_own, by id and owner), and the
    execution that follows is `call_state`'s transaction."""
    found = _own_call(principal, call_id)
    if isinstance(found, Answer):
        return found
    user, mcp = found
    request = ConfirmationRequest.objects.filter(pk=mcp.request_id).first()
    waits = (mcp.status == McpCall.Status.WAITING and request is not None
             and request.policy == ConfirmationRequest.Policy.REQUESTER and request.is_open_at(clock.now()))
    if waits:
        decide = requester_actions.confirmation_confirm_own if confirm else requester_actions.confirmation_cancel_own
        try:  # by id and owner, as the requester's page does: no token is minted
            decide(request_id=request.pk, user=user)
        except (ConfirmationExpired, ConfirmationAlreadyDecided, ConfirmationNotFound):
            pass  # decided or expired meanwhile: its state says what became of it
    return call_state(principal, call_id=mcp.pk)


# -- helpers ------------------------------------------------------------------------------------


def _own_call(principal: Principal, call_id: uuid.UUID) -> tuple[Any, McpCall] | Answer:
    """(the key's user read again, the McpCall `call_id` of this key, unlocked), or the failed
    Answer when the key's user can no longer call. Raises CallNotFound (another key's or tenant's
    call, or an unknown id)."""
    try:
        user = retries.fresh_user(principal)
    except retries.PrincipalGone as gone:
        return answers.refused(gone.code, str(gone))
    mcp = retries.peek(principal, call_id)
    if mcp is None:
        raise CallNotFound("unknown call id")
    return user, mcp


def _context(principal: Principal, user: Any, request_id: str,
             confirmations: dict[str, uuid.UUID] | None = None) -> ToolContext:
    """The server-side ToolContext of an MCP call: the key's user and tenant, the key's
    conversation, the MCP channel on every audit row; no run (no fence: nothing else holds it)."""
    return ToolContext(tenant=user.tenant, user=user, conversation_id=principal.conversation_id,
                       request_id=str(request_id or "")[:64], confirmations=dict(confirmations or {}),
                       channel=principal.channel())


def _tool_name(name: Any, offered: dict) -> str:
    """The client's tool name as the pipeline may store it: an offered tool's name as is; any other
    text (audited as TOOL_NOT_FOUND) with NUL and lone surrogates cleaned (core.text: PostgreSQL
    cannot store them) and masked (a card or phone number typed as a name never reaches a row)."""
    name = storable_text(name if isinstance(name, str) else str(name))
    return name if name in offered else mask_text(name)


def _encoded(arguments: Any) -> Any:
    """The arguments as the pipeline reads a model's: JSON text (None: no arguments, "{}")."""
    if arguments is None:
        return "{}"
    try:
        return json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        return arguments  # not JSON: the pipeline refuses it INVALID_ARGUMENTS


def _hash(ctx: ToolContext, offered: dict, call: ToolCall) -> str | None:
    """The pipeline's hash of the call's validated, normalised arguments (what its request is bound
    to), or None when the tool is not offered or the arguments do not validate."""
    if call.name not in offered:
        return None
    spec = offered[call.name][0]
    try:
        params = normalized_arguments(ctx, spec, validated_arguments(spec, call.arguments))
    except ArgumentsInvalid:
        return None
    return retries.hash_of(params.model_dump(mode="json"))


def _atomically(work) -> Answer:
    """Run `work()` in one durable transaction. An error raised after the transaction's writes
    (a refusal raised to the caller, audited) keeps them: committed, then re-raised (a denial's
    audit row survives); a transaction the database aborted is rolled back."""
    failure: BaseException | None = None
    with transaction.atomic(durable=True):
        try:
            return work()
        except Exception as error:
            if not transaction_usable():
                raise
            failure = error
    raise failure


def _advance(principal: Principal, user: Any, mcp: McpCall, request_id: str) -> Answer:
    """Answer the locked McpCall `mcp` from where it stands: replay an ended call; a request still
    open waits (pending); one past its deadline is expired now (audited); a confirmed one runs once
    (`_execute`); one spent on an attempt that raised fails with its code; one that ended otherwise
    fails with its reason. Inside the call's transaction."""
    request = ConfirmationRequest.objects.select_related("decided_by").filter(pk=mcp.request_id).first()
    if mcp.status != McpCall.Status.WAITING:
        return answers.replay(mcp, request)
    if request is None:  # pragma: no cover - a request is never deleted (PROTECT)
        raise CallNotFound("unknown call id")
    if request.is_due_at(clock.now()):
        expiry.confirmations_expire(request_ids=[request.pk])
        request = ConfirmationRequest.objects.select_related("decided_by").get(pk=request.pk)
    if request.status == Status.PENDING:
        return answers.pending(request, mcp)
    if request.status == Status.CONFIRMED:
        return _execute(principal, user, mcp, request, request_id)
    if request.status == Status.CONSUMED:
        # Spent on an attempt that raised (tools.consume.spend_on_failure): a run that succeeded
        # would have ended this McpCall in the same transaction. It never runs again.
        failed = ToolResult.failure(request.outcome_code or "TOOL_EXECUTION_FAILED",
                                    "the call was attempted once after its approval and failed; it will not run "
                                    "again / 该调用获批后已尝试执行一次但失败，不会再次执行")
        return _store(mcp, failed.to_dict(), ok=False, request=request)
    return _store(mcp, answers.ended(request).to_dict(), ok=False, request=request)


def _execute(principal: Principal, user: Any, mcp: McpCall, request: ConfirmationRequest,
             request_id: str) -> Answer:
    """Run the decided call once through the pipeline's consume path (tools.consume: judged again
    against what is in force now, the decision consumed in the executing transaction): the
    request's stored tool and arguments (an approver's edit included), never what the client sent
    again. Stores the masked result on `mcp` (COMPLETED / FAILED); a call the stricter policy now
    in force sends back to approvers stays WAITING (pending)."""
    manager = ToolCallingManager()
    ctx = _context(principal, user, request_id, confirmations={mcp.tool_call_id: request.pk})
    call = ToolCall(id=mcp.tool_call_id, name=request.tool_name,
                    arguments=json.dumps(request.arguments, ensure_ascii=False))
    outcome: CallOutcome = manager.execute_call(ctx, call, manager.offered(ctx))
    request = ConfirmationRequest.objects.select_related("decided_by").get(pk=request.pk)
    if outcome.pending is not None:
        return answers.pending(request, mcp)
    return _store(mcp, outcome.result.to_dict(), ok=outcome.result.success, request=request)


def _store(mcp: McpCall, result: dict[str, Any], *, ok: bool, request: ConfirmationRequest) -> Answer:
    """End `mcp` with its masked `result` (COMPLETED when the tool ran and succeeded, else FAILED)
    and answer with it; later retries replay it."""
    mcp.status = McpCall.Status.COMPLETED if ok else McpCall.Status.FAILED
    mcp.result = result
    mcp.save(update_fields=["status", "result", "updated_at"])
    state = "completed" if ok else "failed"
    return Answer(state=state, result=result, call_id=mcp.pk, edited=answers.edits(request) if ok else None)
