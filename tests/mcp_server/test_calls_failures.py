"""An MCP call whose approved execution raises (agentplatform.mcp_server.calls): the error reaches
the transport, the decision is spent on that one attempt, and no retry ever runs the tool again."""
from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agentplatform.mcp_server import calls
from agentplatform.mcp_server.models import McpCall
from approvals.models import ConfirmationRequest
from tests.mcp_server.calls_support import caller, code  # noqa: F401 - fixtures
from tests.tools.support import install_tool  # noqa: F401 - fixtures
from tools.context import ToolContext
from tools.registry import ToolSpec

entered: list[str] = []


class Ledger(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entry: str


def _unreachable_ledger(ctx: ToolContext, params: Ledger) -> dict[str, Any]:
    entered.append(params.entry)
    raise OSError("ledger at 10.0.0.7 refused the connection")  # a system error: propagates


FLAKY = ToolSpec(name="test_flaky_ledger", description="Posts to a ledger that is down (test tool).",
                 parameters=Ledger, execute=_unreachable_ledger, risk="HIGH")


def test_an_approved_call_that_raises_is_attempted_once(caller, requester, install_tool):
    entered.clear()
    install_tool(FLAKY, users=[requester])
    first = calls.call_tool(caller, name=FLAKY.name, arguments={"entry": "E-1"})
    assert first.state == "pending"

    with pytest.raises(OSError):
        calls.requester_answer(caller, call_id=first.call_id, confirm=True)
    assert entered == ["E-1"]
    assert ConfirmationRequest.objects.get(pk=first.pending["request_id"]).status == "CONSUMED"

    retried = calls.call_tool(caller, name=FLAKY.name, arguments={"entry": "E-1"})
    state = calls.call_state(caller, call_id=first.call_id)

    assert retried.state == "failed" and code(retried) == "SYSTEM_ERROR" and "will not run again" in retried.result["message"]
    assert state.replayed and code(state) == "SYSTEM_ERROR"
    assert entered == ["E-1"] and McpCall.objects.get().status == McpCall.Status.FAILED
