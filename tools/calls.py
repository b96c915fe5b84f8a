"""The values a governed tool call travels in: the call as the model proposed it, the pending
confirmation of a call that waits for a human, the fate of one call, and the result of a turn.
Plain data, no queries."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.redaction.text import mask_json, mask_text
from tools.context import ToolContext
from tools.levels import ApprovalPolicy
from tools.models import Tool
from tools.policy import EffectivePolicy
from tools.registry import ToolSpec
from tools.results import ToolResult

if TYPE_CHECKING:  # for the annotation only: the tool layer does not load approvals' models here
    from approvals.models import ConfirmationRequest


@dataclass(frozen=True)
class ToolCall:
    """One proposed call, as the model sent it: `arguments` is the raw JSON text (maybe invalid)."""

    id: str
    name: str
    arguments: Any


def parse_tool_calls(assistant_message: dict[str, Any]) -> list[ToolCall]:
    """Read the `tool_calls` of an OpenAI assistant message into ToolCall objects (arguments raw)."""
    calls = []
    for raw in assistant_message.get("tool_calls") or []:
        function = raw.get("function") or {}
        calls.append(ToolCall(id=str(raw.get("id") or ""), name=str(function.get("name") or ""),
                              arguments=function.get("arguments")))
    return calls


@dataclass(frozen=True)
class PendingConfirmation:
    """A gated call waiting for a human. `token` is the raw requester token (once), else None.

    Never put `token` into a model message, a log line or an audit row. Built from its stored
    request by `from_request`, the one place that knows the request's shape.
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
    # the model wrote, shown apart from the summary.
    facts: dict[str, Any] = field(default_factory=dict)
    written_by_assistant: dict[str, str] = field(default_factory=dict)
    # The ids of the policy rules and limits that set the gate ("refunds-over-500-need-two").
    rules: tuple[str, ...] = ()

    @classmethod
    def from_request(cls, request: "ConfirmationRequest", *, tool_call_id: str, token: str | None = None,
                     reason: str = "", regated: dict[str, Any] | None = None) -> "PendingConfirmation":
        """The pending confirmation of the call `tool_call_id` waiting on `request`.

        token: the raw requester token, when one was minted for this answer. reason / regated:
        why a decided call waits again (Regate.told / Regate.notice); both are masked here.
        """
        shown = request.approval_context or {}
        return cls(
            tool_call_id=tool_call_id, confirmation_id=str(request.pk), tool=request.tool_name,
            summary=request.summary, risk=request.risk, needs=needs_of(request.policy), quorum=request.quorum,
            expires_at=request.expires_at.isoformat(), token=token, reason=mask_text(reason),
            regated=mask_json(regated) if regated else None, facts=shown.get("facts") or {},
            written_by_assistant=shown.get("written_by_assistant") or {},
            rules=tuple(vars(request).get("policy_rules") or ()),
        )

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
        if self.rules:
            body["rules"] = list(self.rules)
        return body


def needs_of(policy: str) -> str:
    """Who a request of `policy` waits for: "requester" or "approvers"."""
    return "requester" if policy == ApprovalPolicy.REQUESTER else "approvers"


@dataclass(frozen=True)
class CheckedCall:
    """A call that passed the checks every call shares (tools.governed_call), handed to its flow.

    spec / row: the offered tool. params: the validated, normalised parameters (the tool's pydantic
    model); normalized: the same as JSON (what is hashed, stored and shown). policy: the policy in
    force now. key: the tool's idempotency key for this call, or None.
    """

    ctx: ToolContext
    call: ToolCall
    spec: ToolSpec
    row: Tool
    params: Any
    normalized: dict[str, Any]
    policy: EffectivePolicy
    key: str | None
    # The call's gate (tools.gate.Gate: bundle version, deciding rules) and the arguments as policy
    # read them (with the tool's fills); None / {} outside the pipeline.
    gate: Any = None
    policy_arguments: dict[str, Any] = field(default_factory=dict)


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
    """What `ToolCallingManager.execute_tool_calls` returns for one assistant message.

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
        """True when every call of the turn is return_direct and none waits: the tools' results
        are the answer, and the model is not asked again."""
        return bool(self.outcomes) and not self.must_wait and all(o.return_direct for o in self.outcomes)
