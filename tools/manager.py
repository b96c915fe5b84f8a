"""ToolCallingManager: resolve the definitions offered to a context and run every proposed call
through the governed pipeline of DESIGN section 4 (seed 000 section 2: resolveToolDefinitions /
executeToolCalls).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction
from django.utils.module_loading import import_string
from pydantic import ValidationError

from agentplatform import correlation
from agentplatform.db import retry_on_serialization_failure, transaction_usable
from agentplatform.errors import PermissionDenied
from agentplatform.redaction import mask_json, mask_text
from agentplatform.text import loads_json, unstorable_reason
from approvals import consumption, proposal, unconsumed
from approvals.errors import ConfirmationExpired, ConfirmationNotConsumable, ConfirmationRegated, ConsumeRefused
from approvals.models import ConfirmationRequest
from approvals.selectors import edit_provenance
from audit import events, metrics
from tools.context import FenceLost, ToolContext
from tools.convert import limit_result
from tools.errors import ToolBusinessError, ToolPermissionDenied, ToolValidationError
from tools.hashing import arguments_hash as hash_arguments
from tools.idempotency import Outcome, idempotency_execute, idempotency_peek, run_action
from tools import approval_context, search
from tools.access import refusal_message, tool_access
from tools.masking import mask_mapping
from tools.money import MoneyInvalid
from tools.models import ApprovalPolicy, Tool
from tools.policy import effective_policy
from tools.registry import ToolSpec
from tools.results import ToolResult
from tools.selectors import offered_tools, tool_available_to_tenant, tool_unavailable_reason

logger = logging.getLogger(__name__)

EventSink = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class ToolCall:
    """One proposed call, as the model sent it: `arguments` is the raw JSON text (maybe invalid)."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class PendingConfirmation:
    """A gated call waiting for a human. `token` is the raw requester token (once), else None.

    Never put `token` into a model message, a log line or an audit row.
    """

    tool_call_id: str
    confirmation_id: str
    tool: str
    summary: str
    risk: str
    needs: str  # "requester" | "approvers"
    quorum: int
    expires_at: str
    token: str | None = field(default=None, repr=False)
    reason: str = ""  # why it waits again (the policy became stricter after a decision), else ""
    # ... and the same in parts a client renders: {"cause", "tool", "quorum", "approvals",
    # "message", "message_zh"} (approvals.errors.Regate.notice), else None.
    regated: dict[str, Any] | None = None
    # The approval context captured with the request (masked): the tool's facts and the free text
    # the model wrote, shown apart from the summary (issue 13 items 1 and 7).
    facts: dict[str, Any] = field(default_factory=dict)
    written_by_assistant: dict[str, str] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The client-facing shape without the token (`facts` and `written_by_assistant` only when
        the tool declares them)."""
        body = {"confirmation_id": self.confirmation_id, "tool_call_id": self.tool_call_id, "tool": self.tool,
                "summary": self.summary, "risk": self.risk, "needs": self.needs, "quorum": self.quorum,
                "expires_at": self.expires_at}
        if self.reason:
            body["reason"] = self.reason
        if self.regated:
            body["regated"] = self.regated
        if self.facts:
            body["facts"] = self.facts
        if self.written_by_assistant:
            body["written_by_assistant"] = self.written_by_assistant
        return body


@dataclass(frozen=True)
class CallOutcome:
    """The fate of one call: its ToolResult, and the pending confirmation when it waits."""

    call: ToolCall
    result: ToolResult
    pending: PendingConfirmation | None = None
    return_direct: bool = False

    def tool_message(self) -> dict[str, Any]:
        """The OpenAI tool message answering this call id."""
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.result.to_json()}


@dataclass(frozen=True)
class ToolExecutionResult:
    """What `execute_tool_calls` returns (seed 000 ToolExecutionResult).

    outcomes: one per call, in the model's order. must_wait: some call waits for a human.
    """

    outcomes: list[CallOutcome]
    # The offered tools the calls were resolved against (name -> (ToolSpec, Tool row)); freshly
    # queried when a confirmation was consumed, so a resumed run can keep them (see `resolve`).
    offered: dict[str, tuple[ToolSpec, Tool]] | None = None

    @property
    def pending(self) -> list[PendingConfirmation]:
        """One entry per waiting confirmation request (identical calls of a turn share one)."""
        seen: dict[str, PendingConfirmation] = {}
        for o in self.outcomes:
            if o.pending is not None:
                seen.setdefault(o.pending.confirmation_id, o.pending)
        return list(seen.values())

    @property
    def pending_calls(self) -> dict[str, str]:
        """tool_call_id -> confirmation id of every waiting call (what the run stores)."""
        return {o.pending.tool_call_id: o.pending.confirmation_id for o in self.outcomes if o.pending is not None}

    @property
    def must_wait(self) -> bool:
        return any(o.pending is not None for o in self.outcomes)

    @property
    def tool_messages(self) -> list[dict[str, Any]]:
        """Tool messages of the calls that finished (waiting calls are answered on resume)."""
        return [o.tool_message() for o in self.outcomes if o.pending is None]

    @property
    def return_direct(self) -> bool:
        """True when every call of the turn is return_direct and none waits (seed 002 section 27)."""
        return bool(self.outcomes) and not self.must_wait and all(o.return_direct for o in self.outcomes)


class _Stop(Exception):
    """Internal: a pipeline step stopped the call with this result (already audited)."""

    def __init__(self, result: ToolResult) -> None:
        self.result = result


def parse_tool_calls(assistant_message: dict[str, Any]) -> list[ToolCall]:
    """Read the `tool_calls` of an OpenAI assistant message into ToolCall objects (arguments raw)."""
    calls = []
    for raw in assistant_message.get("tool_calls") or []:
        function = raw.get("function") or {}
        calls.append(ToolCall(id=str(raw.get("id") or ""), name=str(function.get("name") or ""),
                              arguments=function.get("arguments")))
    return calls


def _propagates(error: BaseException) -> bool:
    """DESIGN step 9: which exceptions reach the caller instead of becoming a failure result."""
    if settings.TOOLS_THROW_ON_ERROR:
        return True
    if isinstance(error, (PermissionDenied, DatabaseError, OSError, FenceLost)):
        return True
    return any(isinstance(error, import_string(path)) for path in settings.TOOLS_PROPAGATE_EXCEPTIONS)


def _field_errors(error: ValidationError) -> list[dict[str, str]]:
    # Input values are left out: they may be huge or sensitive.
    return [{"field": ".".join(str(p) for p in e["loc"]) or "(root)", "error": e["msg"]}
            for e in error.errors(include_url=False, include_input=False)][:20]


def _searching(offered: dict[str, Any]) -> bool:
    """True when more tools are offered than TOOL_SEARCH_THRESHOLD: the model gets tool_search."""
    return len(offered) > settings.TOOL_SEARCH_THRESHOLD


_DEFINITIONS: dict[tuple[str, str, type], str] = {}


def _definition(spec: ToolSpec) -> dict[str, Any]:
    """`spec.definition()`, built once per (name, description, parameter model): pydantic rebuilds the
    JSON Schema on every call (about 1 ms per tool, measured by bench/confirm_latency.py) although
    it only changes with the code. Returns a fresh copy each time, so callers may modify it."""
    key = (spec.name, spec.description, spec.parameters)
    text = _DEFINITIONS.get(key)
    if text is None:
        text = _DEFINITIONS[key] = json.dumps(spec.definition())
    return json.loads(text)


class ToolCallingManager:
    """Resolves tool definitions and executes tool calls through the governed pipeline."""

    def offered(self, ctx: ToolContext) -> dict[str, tuple[ToolSpec, Tool]]:
        """name -> (spec, row) of the tools offered to the context's user.

        The set resolved for this run (`resolve`) when the context carries one; queried afresh when
        it does not, and always when a confirmation is consumed: permissions, tenant policy and risk
        are re-checked at consume time, not only when the call was requested (DESIGN section 9).
        """
        if ctx.offered_tools is not None and not ctx.confirmations:
            return ctx.offered_tools
        if ctx.user.tenant_id != ctx.tenant_id:
            return {}  # moved to another tenant since the run began: nothing runs in the old one
        offered = offered_tools(user=ctx.user)
        if ctx.offered:
            offered = {name: pair for name, pair in offered.items() if name in ctx.offered}
        return offered

    def resolve(self, ctx: ToolContext, *, refresh: bool = False) -> tuple[list[dict[str, Any]], ToolContext]:
        """Resolve the tools offered to this context's user now (enabled, allowed for the tenant,
        `use_tool` and the tool's permission held). Returns (OpenAI tool schemas, the context bound
        to that set, for the calls of this run). Tools not offered are not sent to the model at all.

        A context that already carries a resolved set with no confirmation left to consume (a
        resumed run, whose consume re-queried the set a moment ago) keeps that set, unless `refresh`
        (the loop refreshes before every later model call of a run)."""
        if refresh:
            # Django caches permissions and is_active on the user object for its lifetime: read the
            # user again, so a permission revoked or an account deactivated meanwhile is in force.
            ctx = replace(ctx, user=get_user_model().objects.select_related("tenant").get(pk=ctx.user.pk))
        if ctx.offered_tools is not None and not ctx.confirmations and not refresh:
            offered = ctx.offered_tools
        elif ctx.user.tenant_id != ctx.tenant_id:
            offered = {}
        else:
            offered = offered_tools(user=ctx.user)
        bound = replace(ctx, offered=frozenset(offered), offered_tools=offered)
        if _searching(offered):
            # Too many to send: `tool_search` and what this run found with it (seed 002 section 32).
            found = [_definition(offered[name][0]) for name in sorted(ctx.discovered) if name in offered]
            return [search.definition(), *found], bound
        return [_definition(spec) for spec, _ in offered.values()], bound

    def resolve_definitions(self, ctx: ToolContext) -> list[dict[str, Any]]:
        """Return the OpenAI tool schemas offered to this context's user (seed 000
        resolveToolDefinitions). See `resolve`."""
        return self.resolve(ctx)[0]

    def execute_tool_calls(
        self, ctx: ToolContext, assistant_message: dict[str, Any], *, on_event: EventSink | None = None,
        only: set[str] | None = None,
    ) -> ToolExecutionResult:
        """Run each call of an assistant message through the eleven pipeline steps.

        ctx: server-built context (its `confirmations` map call ids to requests to consume on
        resume). only: restrict to these call ids (resume). on_event(type, payload): progress
        sink for TOOL_CALL_STARTED / CONFIRMATION_REQUIRED / TOOL_EXECUTION_COMPLETED.
        Returns the outcomes (every call id answered once, or pending). Raises ToolPermissionDenied
        and system errors (DESIGN step 9) after auditing them.
        """
        emit = on_event or (lambda kind, payload: None)
        offered = self.offered(ctx)
        outcomes = []
        turn: dict[tuple[str, str], CallOutcome] = {}
        for call in parse_tool_calls(assistant_message):
            if only is not None and call.id not in only:
                continue
            emit("TOOL_CALL_STARTED", {"tool_call_id": call.id, "tool": call.name})
            if call.name == search.NAME and _searching(offered):
                outcome = self._search(ctx, call, offered)
            else:
                outcome = self.execute_call(ctx, call, offered, turn=turn)
            if outcome.pending is not None:
                emit("CONFIRMATION_REQUIRED", outcome.pending.public())
            else:
                emit("TOOL_EXECUTION_COMPLETED", {"tool_call_id": call.id, "tool": call.name,
                                                  "success": outcome.result.success, "code": outcome.result.code})
            outcomes.append(outcome)
        return ToolExecutionResult(outcomes, offered=offered)

    def _search(self, ctx: ToolContext, call: ToolCall, offered: dict[str, tuple[ToolSpec, Tool]]) -> CallOutcome:
        """Answer a `tool_search` call from the index of the tools offered to this user in this
        tenant: the best matches' definitions, which the model may call from now on (each call
        still passes the whole pipeline). Audited like any call (the query masked)."""
        audit = _CallAudit(ctx, call, time.perf_counter())
        audit.owner, audit.version = settings.TOOLS_DEFAULT_OWNER, settings.TOOLS_DEFAULT_VERSION
        query = search.parse_query(call.arguments)
        if query is None:
            return CallOutcome(call, audit.invalid('arguments must be {"query": "<what you want to do>"}'))
        audit.arguments({"query": query})
        definitions = {name: _definition(spec) for name, (spec, _) in offered.items()}
        index = search.index_for(tenant_id=ctx.tenant_id, offered=offered, definitions=definitions)
        found = [d["function"] for d in index.search(query, limit=settings.TOOL_SEARCH_RESULTS)]
        ctx.discovered.update(f["name"] for f in found)
        message = f"{len(found)} tools found; call them by name" if found else "no tool matches; rephrase the query"
        return CallOutcome(call, audit.stop("EXECUTED", ToolResult.ok({"tools": found}, message)))

    # -- one call ---------------------------------------------------------------------------------

    def execute_call(self, ctx: ToolContext, call: ToolCall, offered: dict[str, tuple[ToolSpec, Tool]], *,
                     turn: dict[tuple[str, str], CallOutcome] | None = None) -> CallOutcome:
        """Run one call through steps 1-11. See `execute_tool_calls` for the errors raised.

        turn: the gated calls of this model turn so far by (tool, arguments hash); an identical
        gated call shares the first one's confirmation request and outcome (one human decision,
        one execution, both call ids answered). A call that consumes a confirmation
        (`ctx.confirmations`) is judged again against what is in force now: a tool no longer
        offered, a permission lost or a DENY policy refuse the request (REFUSED) and answer the
        model with TOOL_DISABLED / PERMISSION_DENIED / POLICY_DENIED instead of raising.
        """
        bound = correlation.bind(tool=call.name[:100], tool_call_id=call.id)  # for log lines (issue 12)
        try:
            return self._execute_call(ctx, call, offered, turn=turn)
        finally:
            correlation.reset(bound)

    def _execute_call(self, ctx: ToolContext, call: ToolCall, offered: dict[str, tuple[ToolSpec, Tool]], *,
                      turn: dict[tuple[str, str], CallOutcome] | None) -> CallOutcome:
        started = time.perf_counter()
        audit = _CallAudit(ctx, call, started)
        confirmation_id = ctx.confirmations.get(call.id)
        try:
            spec, row = self._resolve(ctx, call, offered, audit, confirmation_id)
            params = self._parse_and_validate(spec, call, audit)
            params = self._normalize(ctx, spec, params, audit)
            normalized = params.model_dump(mode="json")
            audit.arguments(normalized)
            self._authorize(ctx, spec, audit, confirmation_id)
            policy = effective_policy(spec, row)
            audit.policy = policy.policy
            if policy.policy == ApprovalPolicy.DENY:
                raise _Stop(self._refuse(ctx, confirmation_id, audit, ToolResult.failure(
                    "POLICY_DENIED", "the tool policy denies this call")))
            key = spec.idempotency_key(ctx, params) if spec.idempotency_key else None
            audit.idempotency_key = key or ""
            shared = turn is not None and (policy.gated or confirmation_id is not None)
            if shared and (spec.name, audit.hash) in turn:
                return self._same_as(call, turn[(spec.name, audit.hash)], audit)
            if confirmation_id is None and policy.gated:
                # Repeating a finished action answers from its record instead of asking a human.
                earlier = idempotency_peek(tenant_id=ctx.tenant_id, key=key, arguments_hash=audit.hash) \
                    if key else None
                if earlier is not None:
                    return self._finish(spec, call, earlier, audit)
                self._precheck(ctx, spec, params, audit)
                outcome = self._request_confirmation(ctx, call, spec, row, params, normalized, policy, audit, key)
            else:
                outcome = self._execute(ctx, call, spec, params, key, confirmation_id, audit, policy)
            if shared:
                turn[(spec.name, audit.hash)] = outcome
            return outcome
        except _Stop as stop:
            return CallOutcome(call, stop.result)

    def _same_as(self, call: ToolCall, first: CallOutcome, audit) -> CallOutcome:
        """Answer `call` from the identical gated call answered first in the same turn."""
        # The row names the request it was answered from: the shared pending one, or, once decided,
        # the one this call carried (a duplicate of a consumed call is linked to that decision too).
        audit.confirmation_id = first.pending.confirmation_id if first.pending else (
            audit.ctx.confirmations.get(call.id) or audit.confirmation_id)
        if first.pending is not None:
            pending = replace(first.pending, tool_call_id=call.id, token=None)
            audit.write("CONFIRMATION_REQUIRED", first.result)
            return CallOutcome(call, first.result, pending=pending)
        audit.write("IDEMPOTENT_HIT", first.result)
        return CallOutcome(call, first.result, return_direct=first.return_direct)

    def _refuse(self, ctx: ToolContext, confirmation_id, audit, result: ToolResult, *,
                decision: str = "DENIED") -> ToolResult:
        """A call that carried a confirmation is refused at consume time: the request ends REFUSED
        with the code, and the refusal is audited (after any rollback). A request that was no
        longer CONFIRMED because it already ran (a recovery after the worker died past its commit)
        is answered with what ran, never with a refusal (it would tell the model nothing was done).

        Only the request bound to this call (tenant, requester, conversation, tool, arguments) is
        ended: a consumer with another binding is refused without burning it. The run's row is
        locked first (`_hold_run`), in the order run_cancel and a consumption take run and request;
        on a run this process lost the request is left to the run's new holder or its cancel."""
        if confirmation_id is not None:
            audit.confirmation_id = confirmation_id
            if self._hold_run(ctx):
                if not unconsumed.confirmation_refuse(request_id=confirmation_id, code=result.code,
                                                     message=result.message, **_binding(audit)):
                    ran = self._what_ran(ctx, confirmation_id, audit)
                    if ran is not None:
                        return ran
        return audit.stop(decision, result)

    @staticmethod
    def _hold_run(ctx: ToolContext) -> bool:
        """Lock the run's row through the context's fence before a request of it is changed (run,
        then request: the order of run_cancel and of a consumption, so none of them deadlock).
        False when this process no longer holds the run (the step will roll back); True without a
        fence (a call outside a run)."""
        if ctx.fence is None:
            return True
        try:
            ctx.fence()
        except FenceLost:
            return False
        return True

    def _what_ran(self, ctx: ToolContext, confirmation_id, audit) -> ToolResult | None:
        """The stored result of a CONSUMED request's execution (from its idempotency record, or
        its outcome code for keyless tools); None when it did not run, or when the request is not
        this call's tenant's, requester's and conversation's (nothing of another's is told)."""
        request = ConfirmationRequest.objects.filter(pk=confirmation_id, tenant_id=ctx.tenant_id, user_id=ctx.user_id,
                                                     conversation_id=ctx.conversation_id).first()
        if request is None or request.status != ConfirmationRequest.Status.CONSUMED:
            return None
        earlier = idempotency_peek(tenant_id=request.tenant_id, key=request.idempotency_key,
                                   arguments_hash=request.arguments_hash) if request.idempotency_key else None
        if earlier is not None:
            result = earlier.result
        else:
            code = request.outcome_code or "OK"
            result = (ToolResult.ok(None, "this call already ran") if code == "OK"
                      else ToolResult.failure(code, "this call already ran and failed"))
        audit.hash, audit.masked, audit.revision = request.arguments_hash, request.masked_arguments, request.revision
        audit.note_edits()
        return audit.stop("IDEMPOTENT_HIT", result)

    def _resolve(self, ctx, call, offered, audit, confirmation_id=None) -> tuple[ToolSpec, Tool]:
        if call.name in offered:
            audit.tool(offered[call.name][1])
            return offered[call.name]
        if confirmation_id is not None:
            # Decided earlier, no longer offered now: say why, distinct from a tool that never existed.
            code, message = tool_unavailable_reason(name=call.name, user=ctx.user, tenant_id=ctx.tenant_id)
            raise _Stop(self._refuse(ctx, confirmation_id, audit, ToolResult.failure(code, message),
                                     decision="NOT_FOUND" if code == "TOOL_NOT_FOUND" else "DENIED"))
        if call.name and tool_available_to_tenant(name=call.name, tenant_id=ctx.tenant_id):
            # Enabled for the requester's tenant: name what they lack (their own grants only).
            message = refusal_message(tool_access(user=ctx.user, tool=Tool.objects.get(name=call.name)))
            audit.deny("PERMISSION_DENIED", message)
            raise ToolPermissionDenied(message)
        raise _Stop(audit.stop("NOT_FOUND", ToolResult.failure(
            "TOOL_NOT_FOUND", f"no tool named {call.name[:100]!r} is available; use only the offered tools")))

    def _parse_and_validate(self, spec: ToolSpec, call: ToolCall, audit) -> Any:
        raw = call.arguments
        if not isinstance(raw, str):
            raise _Stop(audit.invalid("arguments must be a JSON object encoded as a string"))
        if len(raw.encode("utf-8")) > settings.TOOLS_MAX_ARGUMENT_BYTES:
            raise _Stop(audit.invalid(f"arguments exceed {settings.TOOLS_MAX_ARGUMENT_BYTES} bytes"))
        try:
            parsed = loads_json(raw)
        except ValueError as exc:
            raise _Stop(audit.invalid(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"))
        if not isinstance(parsed, dict):
            raise _Stop(audit.invalid(f"arguments must be a JSON object, not {type(parsed).__name__}"))
        unstorable = unstorable_reason(parsed)
        if unstorable:  # PostgreSQL cannot store it (agentplatform.text): refused, never cleaned
            raise _Stop(audit.invalid(f"arguments {unstorable}, which cannot be processed"))
        try:
            params = spec.parameters.model_validate(parsed)
        except ValidationError as exc:
            raise _Stop(audit.invalid("arguments do not match the tool's schema", {"errors": _field_errors(exc)}))
        if spec.validate is not None:
            try:
                spec.validate(params)
            except ToolValidationError as exc:
                raise _Stop(audit.invalid(exc.message))
        return params

    def _normalize(self, ctx: ToolContext, spec: ToolSpec, params: Any, audit) -> Any:
        """The tool's canonical form of the validated parameters (money in its minor unit), before
        they are hashed, shown or executed. A MoneyInvalid names its field and stable sub-code."""
        if spec.normalize is None:
            return params
        try:
            return spec.normalize(ctx, params)
        except MoneyInvalid as exc:
            raise _Stop(audit.invalid(exc.message, {"errors": [
                {"field": exc.field, "error": exc.message, "code": exc.reason}]}))
        except ToolValidationError as exc:
            raise _Stop(audit.invalid(exc.message))

    def _authorize(self, ctx: ToolContext, spec: ToolSpec, audit, confirmation_id=None) -> None:
        if spec.permission and not ctx.user.has_perm(spec.permission):
            if confirmation_id is not None:
                raise _Stop(self._refuse(ctx, confirmation_id, audit, ToolResult.failure(
                    "PERMISSION_DENIED", f"the requester no longer holds {spec.permission}")))
            message = (f"you may not use the tool {spec.name}: missing the permission {spec.permission}; ask your "
                       f"tenant administrator to grant it / 您无权使用工具 {spec.name}：缺少权限 {spec.permission}，"
                       "请联系租户管理员授予")
            audit.deny("PERMISSION_DENIED", message)
            raise ToolPermissionDenied(message)

    def _precheck(self, ctx: ToolContext, spec: ToolSpec, params: Any, audit) -> None:
        """The tool's read-only precheck before a human is asked: a call that cannot succeed is
        answered with the business code now (audited REFUSED) and mints no confirmation."""
        if spec.precheck is None:
            return
        try:
            spec.precheck(ctx, params)
        except ToolBusinessError as error:
            raise _Stop(audit.stop("REFUSED", ToolResult.failure(error.code, error.message)))

    def _request_confirmation(self, ctx, call, spec, row, params, normalized, policy, audit, key) -> CallOutcome:
        # A savepoint: a request whose approval context fails (it wrote: ReadOnlyViolation) leaves
        # nothing behind, whatever encloses it; confirmation_create inside needs none of its own.
        with transaction.atomic():
            if ctx.fence is not None:
                ctx.fence()  # a run cancelled or taken over meanwhile asks nobody (raises FenceLost)
            return self._create_request(ctx, call, spec, row, params, normalized, policy, audit, key)

    def _create_request(self, ctx, call, spec, row, params, normalized, policy, audit, key) -> CallOutcome:
        shown = approval_context.capture(ctx, spec, params)  # read-only, tenant-scoped, masked
        request, token = proposal.confirmation_create(
            tenant_id=ctx.tenant_id, user_id=ctx.user_id, conversation_id=ctx.conversation_id, run_id=ctx.run_id,
            tool_call_id=call.id, tool_id=row.pk, tool_name=spec.name, arguments=normalized,
            masked_arguments=audit.masked, arguments_hash=audit.hash, summary=spec.summary(params, shown["facts"]),
            risk=policy.risk, policy=policy.policy, quorum=policy.quorum, ttl_seconds=policy.ttl_seconds,
            context_excerpt=ctx.excerpt(), idempotency_key=key or "",
            business_object=spec.business_object(params) if spec.business_object else "",
            approval_context=shown,
        )
        return self._pending_outcome(call, request, token, audit)

    def _pending_outcome(self, call: ToolCall, request, token: str | None, audit, *, reason: str = "",
                         regated: dict[str, Any] | None = None) -> CallOutcome:
        """The waiting outcome of `call` for confirmation `request` (audited CONFIRMATION_REQUIRED).
        reason / regated: why a decided call waits again (Regate.told / Regate.notice)."""
        needs = "requester" if request.policy == ApprovalPolicy.REQUESTER else "approvers"
        pending = PendingConfirmation(
            tool_call_id=call.id, confirmation_id=str(request.pk), tool=request.tool_name, summary=request.summary,
            risk=request.risk, needs=needs, quorum=request.quorum, expires_at=request.expires_at.isoformat(),
            token=token, reason=mask_text(reason), regated=mask_json(regated) if regated else None, facts=(request.approval_context or {}).get("facts") or {},
            written_by_assistant=(request.approval_context or {}).get("written_by_assistant") or {},
        )
        message = f"waiting for {needs} to confirm: {request.summary}"
        if reason:
            message = f"{reason}; {message}"
        result = ToolResult.failure("CONFIRMATION_REQUIRED", message, data=pending.public())
        audit.confirmation_id = request.pk
        audit.write("CONFIRMATION_REQUIRED", result)
        return CallOutcome(call, result, pending=pending)

    def _execute(self, ctx, call, spec, params, key, confirmation_id, audit, policy) -> CallOutcome:
        if spec.remote is not None:
            # A remote tool (an MCP server's): nothing is consumed or claimed for a call that cannot
            # go out (server disabled, breaker open); otherwise the call gets a key even when the
            # tool declares none, so a confirmed call is attempted at most once (docs/remote_tools.md).
            refusal = spec.remote.refusal()
            if refusal is not None:
                # Nothing is sent and nothing runs; the run moves on past this call, so its
                # confirmation could never be used again: it ends REFUSED with the code (never
                # left CONFIRMED on a finished run; docs/decisions.md).
                return CallOutcome(call, self._refuse(ctx, confirmation_id, audit, refusal, decision="REFUSED"))
            key = key or _remote_key(ctx, call, spec, confirmation_id)
            audit.idempotency_key = key

        attempted = False  # the tool's body was entered (in any attempt): a decision spent on it

        def action() -> tuple[ToolResult, str]:
            nonlocal attempted
            attempted = True
            if spec.remote is not None:
                result = spec.remote.execute(ctx, params.model_dump(mode="json"), key=key)
                return (ToolResult.ok(limit_result(result.data)) if result.success else result), ""
            data = spec.execute(ctx, params)
            business_id = spec.business_result_id(data) if spec.business_result_id else ""
            return ToolResult.ok(limit_result(spec.result_converter(data))), business_id

        def consume_and_execute() -> CallOutcome:
            with transaction.atomic():
                audit.execution = lease = None  # an attempt retried after a deadlock fences again
                if ctx.fence is not None and (confirmation_id is not None or not spec.read_only):
                    lease = ctx.fence()  # a holder that lost the run executes nothing (raises FenceLost)
                # The rows this attempt writes name the process and the run lease it ran under.
                audit.execution = {"holder": correlation.holder(), "lease": lease or None}
                if confirmation_id is not None:
                    audit.revision = consumption.confirmation_consume(
                        request_id=confirmation_id, tenant_id=ctx.tenant_id, user_id=ctx.user_id,
                        conversation_id=ctx.conversation_id, tool_name=spec.name, arguments_hash=audit.hash,
                        policy=policy.policy, quorum=policy.quorum, risk=policy.risk, ttl_seconds=policy.ttl_seconds,
                    )
                    if spec.precheck is not None:
                        try:
                            spec.precheck(ctx, params)
                        except ToolBusinessError as error:
                            raise ConsumeRefused(error.message, code=error.code) from None
                if key:
                    outcome = idempotency_execute(tenant_id=ctx.tenant_id, key=key, tool_name=spec.name,
                                                  arguments_hash=audit.hash, action=action, read_only=spec.read_only)
                else:
                    result, business_id, _ = run_action(action, read_only=spec.read_only)
                    outcome = Outcome("EXECUTED", result, business_id)
                if confirmation_id is not None:
                    if outcome.kind not in ("EXECUTED", "IDEMPOTENT_HIT"):
                        # A conflict is not an execution: the decision is not spent on it.
                        raise ConsumeRefused(outcome.result.message, code=outcome.result.code)
                    consumption.confirmation_record_outcome(
                        request_id=confirmation_id,
                        code=outcome.result.code if outcome.kind == "EXECUTED" else "IDEMPOTENT_HIT")
                if settings.TOOLS_THROW_ON_ERROR and outcome.kind == "EXECUTED" and not outcome.result.success:
                    # DESIGN step 9: TOOLS_THROW_ON_ERROR propagates business failures too. Raising
                    # here rolls back the stored failure and the consumption with the failed attempt.
                    raise ToolBusinessError(outcome.result.message, code=outcome.result.code)
                # Audited inside the transaction: if the audit write fails, nothing ran (fail closed).
                return self._finish(spec, call, outcome, audit)

        audit.confirmation_id = confirmation_id
        try:
            # A serialization failure or deadlock rolled the whole attempt back (consume, claim,
            # business change, audit row), so running it again executes the side effect once.
            # consume_and_execute opens its own atomic block: inside the run's step it is a
            # savepoint, and a retry runs inside the same step (agentplatform.db).
            return retry_on_serialization_failure(consume_and_execute, own_savepoint=True)  # at most 3 attempts
        except ConfirmationRegated as regated:
            request = unconsumed.confirmation_regate(request_id=confirmation_id, regate=regated.regate)
            if request is None:
                return CallOutcome(call, audit.stop("DENIED", ToolResult.failure(
                    "CONFIRMATION_INVALID", "the confirmation was decided elsewhere meanwhile")))
            return self._pending_outcome(call, request, None, audit, reason=regated.regate.told(),
                                         regated=regated.regate.notice(tool=request.tool_name))
        except ConsumeRefused as refused:
            return CallOutcome(call, self._refuse(ctx, confirmation_id, audit, ToolResult.failure(
                refused.code, refused.message), decision="REFUSED"))
        except ConfirmationExpired as error:
            return CallOutcome(call, audit.stop("EXPIRED", ToolResult.failure("CONFIRMATION_EXPIRED", error.message)))
        except ConfirmationNotConsumable as error:
            # Already consumed: by an earlier attempt whose worker died after committing (recovery),
            # or by a racing resume. A keyed call answers from the record that attempt stored.
            earlier = idempotency_peek(tenant_id=ctx.tenant_id, key=key, arguments_hash=audit.hash) if key else None
            if earlier is not None:
                return self._finish(spec, call, earlier, audit)
            # A binding that does not match (another user, tenant, conversation, tool or arguments)
            # does not burn the request: its own run may still consume it (tests/approvals/test_binding.py).
            return CallOutcome(call, audit.stop("DENIED", ToolResult.failure("CONFIRMATION_INVALID", error.message)))
        except Exception as error:  # DESIGN step 9
            if _propagates(error):
                code = getattr(error, "code", None)  # ours are strings; urllib's HTTPError (an OSError) has an int
                code = code if isinstance(code, str) and code else "SYSTEM_ERROR"
                if not isinstance(error, FenceLost) and transaction_usable():
                    # Not for a lost run or an aborted transaction: the step rolls back and the
                    # run's next holder consumes the confirmation itself. A database error the
                    # consumption's savepoint contained leaves the step to commit: spend it.
                    self._spend_on_failure(ctx, confirmation_id, audit, attempted, code, type(error).__name__)
                audit.write("FAILED", ToolResult.failure(code, type(error).__name__))
                raise
            logger.exception("tool %s failed", spec.name)
            self._spend_on_failure(ctx, confirmation_id, audit, attempted, "TOOL_EXECUTION_FAILED",
                                   type(error).__name__)
            return CallOutcome(call, audit.stop("FAILED", ToolResult.failure(
                "TOOL_EXECUTION_FAILED", f"the tool failed ({type(error).__name__}); try again later",
                retryable=True, terminal=False)))

    def _spend_on_failure(self, ctx: ToolContext, confirmation_id, audit, attempted: bool, code: str,
                          error_name: str) -> None:
        """Close the confirmation of a call whose attempt raised (the consumption rolled back with
        it, leaving the request CONFIRMED): the run answers the call with the failure and moves on,
        so nothing could ever consume the request again, and it must not stay CONFIRMED ("approved,
        waiting to run") on a finished run (docs/decisions.md). Entered the tool: CONSUMED with the
        code (the decision was spent on an attempt that failed; approvers see FAILED (code)); failed
        before the tool was entered: REFUSED with the code (nothing ran). No-op without one, for a
        request bound to another call, and on a run this process lost (`_hold_run`, which also
        takes the run's row before the request's, as run_cancel does)."""
        if confirmation_id is None or not self._hold_run(ctx):
            return
        if attempted:
            unconsumed.confirmation_spend_failed(request_id=confirmation_id, code=code, **_binding(audit))
        else:
            unconsumed.confirmation_refuse(request_id=confirmation_id, code=code,
                                          message=f"the call failed before the tool ran ({error_name})",
                                          **_binding(audit))

    def _finish(self, spec: ToolSpec, call: ToolCall, outcome: Outcome, audit) -> CallOutcome:
        decision = {"EXECUTED": "EXECUTED" if outcome.result.success else "FAILED",
                    "IDEMPOTENT_HIT": "IDEMPOTENT_HIT"}.get(outcome.kind, "REFUSED")
        audit.business_result_id = outcome.business_result_id
        audit.note_edits()
        audit.write(decision, outcome.result)
        return CallOutcome(call, outcome.result, return_direct=spec.return_direct)


def _binding(audit: "_CallAudit") -> dict[str, Any]:
    """The binding of the call `audit` describes, as `unconsumed.confirmation_refuse` takes it: a
    request is ended only from the call it is bound to (DESIGN section 8). The arguments hash is
    "" until the arguments were validated (a call refused before that is matched without it)."""
    ctx = audit.ctx
    return {"tenant_id": ctx.tenant_id, "user_id": ctx.user_id, "conversation_id": ctx.conversation_id,
            "tool_name": audit.call.name[:100], "arguments_hash": audit.hash}


def _remote_key(ctx: ToolContext, call: ToolCall, spec: ToolSpec, confirmation_id) -> str:
    """The idempotency key of a remote call whose tool declares none: bound to the confirmation it
    consumes (one decision, one attempt), else to this run's tool call id."""
    import hashlib

    bound = f"confirmation:{confirmation_id}" if confirmation_id is not None else f"call:{ctx.run_id}:{call.id}"
    return hashlib.sha256(f"{ctx.tenant_id}:{spec.name}:{bound}".encode()).hexdigest()


class _CallAudit:
    """Collects the audit fields of one call as the pipeline learns them (step 11)."""

    def __init__(self, ctx: ToolContext, call: ToolCall, started: float) -> None:
        self.ctx, self.call, self.started = ctx, call, started
        self.hash, self.masked, self.policy = "", None, ""
        self.idempotency_key, self.business_result_id = "", ""
        self.confirmation_id = None
        self.owner, self.version = "", ""
        self.execution = None  # set once the execution passed its fence (AuditEvent.execution)
        self.edits: dict[str, Any] | None = None
        self.revision: int | None = None  # of the consumed request, when known (0: never edited)

    def note_edits(self) -> None:
        """Name in this call's rows who edited it before it ran, beside the requester (the row's
        actor): an approver's edit is part of what ran. Only for a call that consumed a request;
        no query for one known to be unedited (the common case, on the governed call's path)."""
        if self.confirmation_id is not None and self.revision != 0:
            self.edits = edit_provenance(request_id=self.confirmation_id)

    def tool(self, row: Tool) -> None:
        """Record the resolved tool's owner and version in every later row of this call."""
        self.owner, self.version = row.owner, row.version

    def arguments(self, normalized: dict[str, Any]) -> None:
        self.hash = hash_arguments(normalized)
        self.masked = mask_mapping(normalized)

    def write(self, decision: str, result: ToolResult) -> None:
        seconds = time.perf_counter() - self.started
        masked, message = self.masked, result.message
        if self.edits is not None:
            # "_edit" is the platform's key, not an argument (docs/approvals.md): the arguments that
            # ran are the edited ones (arguments_hash), the requester's are original_arguments_hash.
            masked = {**(masked or {}), "_edit": self.edits}
            message = (f"arguments edited by {', '.join(self.edits['edited_by'])} before it ran (requested by "
                       f"{self.edits['requested_by']}): {message}")
        events.tool_call_decided(
            tenant_id=self.ctx.tenant_id, actor_id=self.ctx.user_id, decision=decision,
            tool_name=self.call.name[:100], tool_owner=self.owner, tool_version=self.version,
            status=result.code, policy_decision=self.policy,
            request_id=self.ctx.request_id, conversation_id=self.ctx.conversation_id, run_id=self.ctx.run_id,
            tool_call_id=self.call.id, arguments_hash=self.hash, masked_arguments=masked,
            confirmation_id=self.confirmation_id, idempotency_key=self.idempotency_key,
            business_result_id=self.business_result_id, duration_ms=round(seconds * 1000, 3),
            message=message, execution=self.execution,
        )
        metrics.tool_finished(tool_name="_unknown" if decision == "NOT_FOUND" else (self.call.name[:100] or "-"),
                              seconds=seconds, result_bytes=len(result.to_json()), tenant_id=self.ctx.tenant_id)

    def stop(self, decision: str, result: ToolResult) -> ToolResult:
        self.write(decision, result)
        return result

    def invalid(self, message: str, data: Any = None) -> ToolResult:
        return self.stop("INVALID", ToolResult.failure("INVALID_ARGUMENTS", message, data=data))

    def deny(self, code: str, message: str) -> None:
        self.write("DENIED", ToolResult.failure(code, message))
