"""The agent loop: call the model with memory and the offered tools, run every proposed call
through the ToolCallingManager, suspend on gated calls, finish with the model's answer.

A run starts here (`run_start`, `run_create`) and continues here after a resume
(`runtime.claims`). No database transaction is held across a model call; what the loop writes
between two model calls is one step (`runtime.step`).
"""
from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import transaction

from core import clock, correlation
from core.sql.batches import Together
from core.sql.transactions import release_connection_while_waiting
from core.errors import DomainError
from agentplatform.llm import pending as llm_pending
from agentplatform.llm.errors import ModelError
from agentplatform.llm.window import complete_in_window
from agentplatform.runtime import ending, quota, tracing
from agentplatform.runtime.context import build_tool_context
from agentplatform.runtime.eligibility import is_eligible
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.leases import RunClaimLost, new_lease
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from agentplatform.runtime.outcome import Listener, RunOutcome, RunParked
from agentplatform.runtime.prompt import system_messages
from agentplatform.runtime.refusal import turn_refuse
from agentplatform.runtime.selectors import memory_messages
from agentplatform.runtime.step import HeldRun, Step
from tools.context import ToolContext
from tools.manager import ToolCallingManager


def run_start(
    *,
    user,
    message: str,
    conversation: Conversation,
    request_id: str = "",
    internal_tool_execution: bool | None = None,
    listener: Listener | None = None,
    manager: ToolCallingManager | None = None,
) -> RunOutcome:
    """Start a run for one user message and drive it until it answers, waits, or fails.

    conversation must already belong to `user` (selectors.conversation_get, or services.conversation_new).
    internal_tool_execution: None = settings.AGENT_INTERNAL_TOOL_EXECUTION; False = hand the
    proposed calls to the caller (user-controlled execution). Raises ToolPermissionDenied when
    the model proposes a tool the user may not use (after marking the run FAILED).
    """
    # The run stores this span's context: its resume continues the trace (runtime.tracing).
    with tracing.invoke_agent("start") as span:
        run, fresh, admit = _store_run(user=user, message=message, conversation=conversation, request_id=request_id,
                                       internal_tool_execution=internal_tool_execution, lease_expires_at=new_lease(),
                                       admit=True)
        tracing.run_known(span, run)
        correlation.set_run_id(run.pk)
        correlation.bind(conversation_id=conversation.pk)
        held = HeldRun(run, EventRecorder(run, listener, last_seq=0), fresh_conversation=fresh)  # no events yet
        if admit is not None:
            held.admitted(admit)
        try:
            return advance(held, build_tool_context(run, held=held), manager or ToolCallingManager())
        finally:
            tracing.run_ended(span, run)


def run_create(*, user, message: str, conversation: Conversation, request_id: str = "",
               internal_tool_execution: bool | None = None, lease_expires_at=None) -> Run:
    """Store a new RUNNING run for one user message (and the message), nothing more. Returns it.

    conversation: stored, or new and not saved yet (`services.conversation_new`): it is then
    created in the same transaction as the run (one commit for a first message).
    lease_expires_at: the caller's lease when it drives the run now (run_start); None stores the
    run parked, for `run_resume` to claim in a worker (POST /chat/ with `Prefer: respond-async`);
    a parked run whose message was lost is pushed by the recovery sweep.
    """
    run, _, _ = _store_run(user=user, message=message, conversation=conversation, request_id=request_id,
                           internal_tool_execution=internal_tool_execution, lease_expires_at=lease_expires_at,
                           admit=False)
    return run


def _store_run(*, user, message: str, conversation: Conversation, request_id: str,
               internal_tool_execution: bool | None, lease_expires_at, admit: bool):
    """`run_create`, returning (run, whether its conversation was created with it, the check of
    its first model call's admission counted in the same statement, or None when not `admit`)."""
    if internal_tool_execution is None:
        internal_tool_execution = settings.AGENT_INTERNAL_TOOL_EXECUTION
    fresh = conversation._state.adding
    with transaction.atomic():
        # One statement (core.sql.batches.Together; these models have no save() override and no
        # signal receivers): the first step of every run.
        together = Together()
        if fresh:
            together.insert_instance(conversation)
        else:
            together.update(Conversation, conversation.pk, {"updated_at": clock.now()})
        # `internal` is stored from the start: a run recovered after a crash must keep it.
        run = Run(tenant_id=user.tenant_id, user=user, conversation=conversation,
                  request_id=request_id[:64] or uuid.uuid4().hex, lease_expires_at=lease_expires_at,
                  state={"messages": [{"role": "user", "content": message}], "internal": internal_tool_execution},
                  trace_context=tracing.stored_context())
        together.insert_instance(run)
        together.insert_instance(Message(conversation=conversation, run=run, role="user", content=message))
        # The run's first model call follows at once: counted in this statement.
        admitted = together.statement(*quota.admission_statement(tenant_id=run.tenant_id)) if admit else None
        results = together.send()
        admission = (lambda: quota.admission_check(results[admitted][0])) if admitted is not None else None
    if user.tenant_id is not None and getattr(user, "tenant", None) is not None:
        run.tenant = user.tenant  # loaded with the user already: no second read for the ToolContext
    # A conversation created with its first run holds nothing else yet: no memory, nothing
    # waiting (the loop skips reading them).
    return run, fresh, admission


def _excerpt(memory: list[dict[str, Any]], messages: list[dict[str, Any]], limit: int = 3) -> str:
    """The last `limit` user messages of the conversation (memory, then this run), for approvers
    to see what led to a request; as runtime.selectors.conversation_excerpt, from memory."""
    said = [m["content"] for m in [*memory, *messages] if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return "\n".join(f"user: {text[:300]}" for text in said[-limit:])


def advance(held: HeldRun, ctx: ToolContext, manager: ToolCallingManager, *, park: bool = False) -> RunOutcome:
    """Drive a run this process holds through model calls until it answers, waits for a decision,
    hands its calls to the caller, or fails (MAX_ITERATIONS, a model or tool error).

    park: on a retryable model error, keep the run's state, park it and raise RunParked instead of
    failing it. A DomainError or any other error ends the run (FAILED) and propagates; RunClaimLost
    propagates (this process no longer holds the run). Returns the run's outcome."""
    run = held.run
    fresh = held.fresh_conversation
    waiting = [] if fresh else llm_pending.waiting_calls(conversation_id=run.conversation_id)
    system = system_messages(waiting)
    memory = [] if fresh else memory_messages(conversation=run.conversation, exclude_run=run)
    # What approvers see of the conversation, from the messages already in hand (no query).
    ctx = replace(ctx, conversation_excerpt=lambda: _excerpt(memory, run.state["messages"]))
    try:
        definitions, ctx = manager.resolve(ctx)
        internal = run.state.get("internal", True)
        first = True
        while run.iterations < settings.AGENT_MAX_ITERATIONS:
            if not first:
                # Permissions, whitelist and risk are checked again before every model call of a
                # run, not once per run (one query): a grant revoked meanwhile takes effect now.
                definitions, ctx = manager.resolve(ctx, refresh=True)
            first = False
            held.take_admission()
            release_connection_while_waiting()  # no pooled connection held through the model call
            turn = complete_in_window(system=system, memory=memory, messages=run.state["messages"],
                                      tools=definitions, on_text=held.recorder.text)
            # The rest of the streamed text is stored with the step that follows (its first
            # event flushes it, in order), not in a statement and a commit of its own.
            run.iterations += 1
            if not turn.has_tool_calls:
                return ending.finish(held, turn.content, stop_reason=turn.finish_reason, waiting=waiting)
            # One step: the assistant's turn, its tool calls (confirmation requests or executions
            # with their audit rows), the tool messages, events and the run's state.
            with Step.begin(held) as step:
                assistant = turn.assistant_message()
                step.append(assistant)
                if turn.complete and not is_eligible(internal, turn):
                    # User-controlled execution: hand the calls to the caller. Never those of a
                    # turn cut short (length, a filter): they are refused below, as in internal
                    # execution, and the model is asked again.
                    run.status, run.stop_reason = Run.Status.COMPLETED, "tool_calls"
                    step.save_run("status", "stop_reason", "state", "iterations")
                    step.emit(RunEvent.Type.DONE, {"status": run.status, "tool_calls": assistant["tool_calls"]})
                    return RunOutcome(run, tool_calls=assistant["tool_calls"])
                if turn_refuse(step, ctx, turn, manager):
                    step.save_run("state", "iterations")
                    if run.iterations < settings.AGENT_MAX_ITERATIONS:
                        step.admit_next_call()
                    continue
                result = manager.execute_tool_calls(ctx, assistant, on_event=step.emit)
                for message in result.tool_messages:
                    step.append(message)
                if result.must_wait:
                    run.state["pending"] = result.pending_calls
                    run.state["assistant_index"] = len(run.state["messages"]) - 1 - len(result.tool_messages)
                    run.status = Run.Status.AWAITING_CONFIRMATION
                    step.save_run("status", "state", "iterations")
                    return RunOutcome(run, pending=result.pending)
                step.save_run("state", "iterations")
                if not result.return_direct and run.iterations < settings.AGENT_MAX_ITERATIONS:
                    step.admit_next_call()
            if result.return_direct:
                answer = "\n".join(o.result.to_json() for o in result.outcomes)
                return ending.finish(held, answer, stop_reason="return_direct")
        ending.fail(held, "MAX_ITERATIONS", f"the agent stopped after {settings.AGENT_MAX_ITERATIONS} model calls")
        return RunOutcome(run)
    except ModelError as error:
        if park and error.retryable:
            # Keep what this run did so far; a retry of the task continues from here.
            held.save("state", "iterations", park=True)
            raise RunParked(str(error)) from error
        ending.fail(held, error.code, error.message)
        return RunOutcome(run)
    except DomainError as error:
        ending.fail(held, error.code, error.message)
        raise
    except RunClaimLost:
        raise
    except Exception as error:  # an error propagated to the caller ends the run too
        ending.fail(held, "SYSTEM_ERROR", f"the run stopped on {type(error).__name__}")
        raise
