"""The tool calls a run answered, for the synchronous chat answer: what ran (or was refused or
decided against), with the arguments that ran, masked. Reads only."""
from __future__ import annotations

import json
from typing import Any

from agentplatform.runtime.models import Run, RunEvent
from approvals.models import ConfirmationRequest
from core.redaction.fields import mask_mapping


def _proposed(run: Run) -> dict[str, tuple[str, str]]:
    """call id -> (tool name, raw arguments text) of the assistant messages kept in the run's state."""
    calls: dict[str, tuple[str, str]] = {}
    for message in (run.state or {}).get("messages") or []:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            calls[str(call.get("id") or "")] = (str(function.get("name") or ""), str(function.get("arguments") or ""))
    return calls


def _ran_arguments(raw: str) -> dict[str, Any]:
    """The masked arguments of a call that ran: the pipeline validated them, so they parse into a
    flat object; anything else (a hostile text that never ran) is not repeated."""
    try:
        arguments = json.loads(raw or "{}")
        return mask_mapping(arguments) if isinstance(arguments, dict) else {}
    except (ValueError, RecursionError):
        return {}


def run_answered_calls(*, run: Run) -> list[dict[str, Any]]:
    """Each tool call `run` answered, in the order they ended: [{"id", "type": "function",
    "function": {"name", "arguments" (JSON text, masked; "{}" for a call that did not succeed)},
    "success", "code"}]. `success` is true when the call ran and succeeded; `code` is the result
    code (OK, a business failure, a refusal such as REJECTED). A call an approver edited lists the
    arguments that ran. Calls still waiting are not listed (they are in `pending`). Two queries."""
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
        name, raw = proposed.get(call_id, (str(payload.get("tool") or ""), ""))
        # What ran: an edited call's stored arguments, else the proposal (only for a call that ran).
        success = bool(payload.get("success"))
        shown = edited[call_id] if call_id in edited else (_ran_arguments(raw) if success else {})
        answered.append({"id": call_id, "type": "function",
                         "function": {"name": name or str(payload.get("tool") or ""),
                                      # ASCII escapes: a refused call's arguments may hold text
                                      # that cannot be encoded (a lone surrogate the model sent)
                                      "arguments": json.dumps(shown, ensure_ascii=True, sort_keys=True)},
                         "success": success, "code": str(payload.get("code") or "")})
    return answered
