"""MCP Tasks (protocol revision 2025-11-25) for calls that wait for people.

mcp 2.3.0 serves no `tasks/*` method itself (its 2025-11-25 surface leaves them out and its
`tools/call` result type is CallToolResult only), so this module serves them on the lowlevel
Server: a `tools/call` carrying `params.task` on a 2025-11-25 connection is answered by a server
middleware with a CreateTaskResult when the governed call is gated (the task id is the McpCall id);
a call that ends at once (ran, or refused) answers its CallToolResult as without a task.
`tasks/get` maps calls.call_state to working (approvers) / input_required (the requester) /
completed / failed / cancelled (withdrawn); `tasks/result` re-reads the state every
MCP_TASK_POLL_SECONDS for at most MCP_TASK_RESULT_WAIT_SECONDS (asking the requester with an
elicitation form when the call waits on them and the client can be asked), then answers the
CallToolResult (a pending one when still undecided); `tasks/cancel` withdraws the request (never runs it).
Another key's or an unknown task id: JSON-RPC -32602 with `data.code` TASK_NOT_FOUND.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentplatform.mcp_server import calls, elicit
from agentplatform.mcp_server.models import McpCall
from agentplatform.mcp_server.threads import in_thread

TASKS_VERSION = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
CAPABILITY = types.ServerTasksCapability(
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())))


def _not_found() -> MCPError:
    return MCPError(code=-32602, message="unknown task", data={"code": calls.CallNotFound.code})


def _call_id(task_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(task_id)
    except (ValueError, TypeError, AttributeError):
        raise _not_found() from None


def status_of(answer: calls.Answer) -> str:
    """The MCP task status of an Answer."""
    if answer.state == "pending":
        return "input_required" if answer.waits_on_requester else "working"
    if answer.state == "completed":
        return "completed"
    return "cancelled" if (answer.result or {}).get("code") == "WITHDRAWN" else "failed"


def task_of(answer: calls.Answer, call_id: uuid.UUID, times: tuple[Any, Any]) -> dict[str, Any]:
    """The wire Task of the call: id, status, a status message, times, ttl and poll interval (ms)."""
    pending = answer.pending or {}
    message = (f"waiting for {pending.get('needs', '')}: {pending.get('url', '')}" if answer.state == "pending"
               else str((answer.result or {}).get("message", ""))[:300])
    task = types.Task(task_id=str(call_id), status=status_of(answer), status_message=message,
                      created_at=times[0].isoformat(), last_updated_at=times[1].isoformat(),
                      ttl=settings.MCP_RETRY_WINDOW_SECONDS * 1000,
                      poll_interval=int(settings.MCP_TASK_POLL_SECONDS * 1000))
    return task.model_dump(by_alias=True, mode="json", exclude_none=True)


def _state(principal: calls.Principal, call_id: uuid.UUID) -> tuple[calls.Answer, tuple[Any, Any]]:
    """calls.call_state and the McpCall's times (runs queries: call it in a thread)."""
    answer = calls.call_state(principal, call_id=call_id)
    row = McpCall.objects.filter(pk=call_id).values_list("created_at", "updated_at").first()
    return answer, row


async def state(ctx: ServerRequestContext[Any, Any], task_id: str) -> tuple[calls.Answer, uuid.UUID, tuple[Any, Any]]:
    """(Answer, call id, times) of the caller's task `task_id`. Raises MCPError TASK_NOT_FOUND."""
    from agentplatform.mcp_server.replies import principal_of

    call_id = _call_id(task_id)
    try:
        answer, times = await in_thread(_state, principal_of(ctx), call_id)
    except calls.CallNotFound:
        raise _not_found() from None
    return answer, call_id, times


async def tasks_middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """A `tools/call` with `params.task` on a 2025-11-25 connection: run it, and answer a gated call
    with a CreateTaskResult (the SDK's tools/call surface has no room for it, so this returns the
    wire result itself). Everything else passes through."""
    params = ctx.params
    if (ctx.method != "tools/call" or ctx.protocol_version != TASKS_VERSION or not isinstance(params, Mapping)
            or params.get("task") is None):
        return await call_next(ctx)
    from agentplatform.mcp_server.replies import answer_result, run_call

    typed = types.CallToolRequestParams.model_validate(dict(params), by_name=False)
    answer = await run_call(ctx, typed, elicit_now=False)
    if answer.state != "pending" or answer.call_id is None:
        return answer_result(answer).model_dump(by_alias=True, mode="json", exclude_none=True)
    answer, call_id, times = await state(ctx, str(answer.call_id))
    return {"task": task_of(answer, call_id, times)}


async def tasks_get(ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
    """tasks/get: the task's current state (runs the call now if it was approved and has not run)."""
    answer, call_id, times = await state(ctx, params.task_id)
    return task_of(answer, call_id, times)


async def tasks_result(ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
    """tasks/result: the call's CallToolResult once it ended, waiting up to
    MCP_TASK_RESULT_WAIT_SECONDS; the pending result when it is still undecided by then."""
    from agentplatform.mcp_server.replies import answer_result, principal_of

    answer, call_id, _ = await state(ctx, params.task_id)
    asked = False
    with anyio.move_on_after(settings.MCP_TASK_RESULT_WAIT_SECONDS):
        while answer.state == "pending":
            if answer.waits_on_requester and not asked and elicit.usable(ctx):
                asked = True
                answer = await elicit.confirm(ctx, principal_of(ctx), answer)
                continue
            await anyio.sleep(settings.MCP_TASK_POLL_SECONDS)
            answer, call_id, _ = await state(ctx, params.task_id)
    result = answer_result(answer).model_dump(by_alias=True, mode="json", exclude_none=True)
    result["_meta"] = {**result.get("_meta", {}), RELATED_TASK: {"taskId": str(call_id)}}
    return result


def _withdraw(principal: calls.Principal, call_id: uuid.UUID) -> str:
    """Withdraw the waiting request of the caller's call `call_id`, never running it. Returns
    "withdrawn" (or expired/withdrawn meanwhile: its state says so), "ended" (the call already
    ended) or "decided" (approved and not run yet: it runs at the next retry, tasks/get or
    tasks/result, never because of a cancel). Raises CallNotFound for another's or an unknown id."""
    from approvals.errors import ConfirmationAlreadyDecided, ConfirmationExpired, ConfirmationNotFound
    from approvals.requester_actions import confirmation_withdraw

    mcp = McpCall.objects.filter(pk=call_id, api_key_id=principal.api_key.pk, tenant_id=principal.tenant_id,
                                 user_id=principal.user.pk).first()
    if mcp is None:
        raise calls.CallNotFound("unknown call id")
    if mcp.status != McpCall.Status.WAITING:
        return "ended"
    try:
        confirmation_withdraw(request_id=mcp.request_id, requester=principal.user,
                              reason="withdrawn by the MCP client (tasks/cancel)")
    except ConfirmationAlreadyDecided:
        return "decided"
    except (ConfirmationExpired, ConfirmationNotFound):
        pass  # expired meanwhile: the state read next says what became of it
    return "withdrawn"


async def tasks_cancel(ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams) -> dict[str, Any]:
    """tasks/cancel: withdraw the waiting request; nothing runs (a cancel never executes a call). A
    task that already ended answers -32602 with data.code TASK_ENDED; one approved and not yet
    run, -32602 ALREADY_DECIDED (its next tasks/result or retry runs it)."""
    from agentplatform.mcp_server.replies import principal_of

    call_id = _call_id(params.task_id)
    try:
        outcome = await in_thread(_withdraw, principal_of(ctx), call_id)
    except calls.CallNotFound:
        raise _not_found() from None
    if outcome == "ended":
        raise MCPError(code=-32602, message="the task already ended", data={"code": "TASK_ENDED"})
    if outcome == "decided":
        raise MCPError(code=-32602, message="the call was already approved; it can no longer be cancelled",
                       data={"code": "ALREADY_DECIDED"})
    answer, call_id, times = await state(ctx, params.task_id)
    return task_of(answer, call_id, times)


def install(server: Any) -> None:
    """Serve tasks on `server`: the tools/call middleware (inside the error-code one) and the
    tasks/get, tasks/result and tasks/cancel handlers."""
    server.middleware.append(tasks_middleware)
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, tasks_get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, tasks_result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, tasks_cancel)
