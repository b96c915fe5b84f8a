"""The tool calls a run answered, for the synchronous chat answer: what ran (or was refused or
decided against), with the arguments that ran, masked. Reads only."""
from __future__ import annotations

import json
from typing import Any

from agentplatform.runtime.models import Run, RunEvent
from approvals.models import ConfirmationRequest
from core.redaction.fields import mask_mapping


def _proposed(run: Run) -> dict[str, tuple[str, dict[str, Any]]]:
    """call id -> (tool name, arguments) of the assistant messages kept in the run's state."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in (run.state or {}).get("messages") or []:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls[str(call.get("id") or "")] = (str(function.get("name") or ""),
                                                arguments if isinstance(arguments, dict) else {})
    return calls


def run_answered_calls(*, run: Run) -> list[dict[str, Any]]:
    """Each tool call `run` answered, in the order they ended: [{"id", "type": "function",
    "function": {"name", "arguments" (JSON text, masked)}, "success", "code"}]. `success` is true
    when the call ran and succeeded; `code` is the result code (OK, a business failure, a refusal
    such as REJECTED). A call an approver edited lists the arguments that ran. Calls still waiting
    are not listed (they are in `pending`). Two queries."""
    proposed = _proposed(run)
    edited = {r.tool_call_id: r.masked_arguments for r in ConfirmationRequest.objects.filter(
        run_id=run.pk, tenant_id=run.tenant_id, revision__gt=0).only("tool_call_id", "masked_arguments")}
    answered: list[dict[str, Any]] = []
    seen: set[str] = set()
    for payload in run.events.filter(type=RunEvent.Type.TOOL_EXECUTION_COMPLETED).order_by("seq") \
            .values_list("payload", flat=True):
        call_id = str(payload.get("tool_call_id") or "")
        if not call_id or call_id in seen:
            continue
        seen.add(call_id)
        name, arguments = proposed.get(call_id, (str(payload.get("tool") or ""), {}))
        shown = edited.get(call_id) if call_id in edited else mask_mapping(arguments)
        answered.append({"id": call_id, "type": "function",
                         "function": {"name": name or str(payload.get("tool") or ""),
                                      # ASCII escapes: a refused call's arguments may hold text
                                      # that cannot be encoded (a lone surrogate the model sent)
                                      "arguments": json.dumps(shown, ensure_ascii=True, sort_keys=True)},
                         "success": bool(payload.get("success")), "code": str(payload.get("code") or "")})
    return answered
