"""A whole agent of the OpenAI Agents SDK (an `Agent` run by its `Runner`, with our MCP server in
`mcp_servers`), its model scripted so no network is used: what the platform answers is what the
agent's model reads as the tool's output. The pending answer tells the model to retry the same
call; the retry after the requester's confirmation runs it once.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentplatform.runtime.demo.seed import order_id
from approvals import requester_actions
from approvals.models import ConfirmationRequest
from tests.mcp_server.third_party_support import CLIENT_TIMEOUT_SECONDS, issue_key
from tools.catalog.models import Cancellation, Order

pytestmark = pytest.mark.django_db(transaction=True)


class ScriptedModel:
    """An Agents SDK Model answering from a script: each turn is ("call", tool, arguments) or
    ("say", text). `inputs` keeps what the SDK sent on each turn (the tool outputs included)."""

    def __init__(self, turns: list[tuple[str, ...]]) -> None:
        from agents.models.interface import Model

        self.turns, self.inputs = list(turns), []
        script = self

        class _Model(Model):
            async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                                   handoffs, tracing, **kwargs) -> Any:
                script.inputs.append({"input": input, "tools": [t.name for t in tools]})
                return script.respond(len(script.inputs))

            def stream_response(self, *args, **kwargs):  # pragma: no cover - the Runner is not streamed here
                raise NotImplementedError

        self.model = _Model()

    def respond(self, turn: int) -> Any:
        from agents.items import ModelResponse
        from agents.usage import Usage
        from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

        kind, *rest = self.turns.pop(0)
        if kind == "call":
            name, arguments = rest
            item = ResponseFunctionToolCall(type="function_call", id=f"fc_{turn}", call_id=f"call_{turn}", name=name,
                                            arguments=json.dumps(arguments), status="completed")
        else:
            item = ResponseOutputMessage(type="message", id=f"msg_{turn}", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=rest[0], annotations=[])])
        return ModelResponse(output=[item], usage=Usage(), response_id=None)


def tool_outputs(model: ScriptedModel) -> list[str]:
    """The function_call_output texts the model had read by its last turn (each turn's input is
    the whole history), in order."""
    items = model.inputs[-1]["input"]
    return [str(item.get("output")) for item in items if isinstance(item, dict)
            and item.get("type") == "function_call_output"] if isinstance(items, list) else []


async def _run_agent(url: str, key: str, model: ScriptedModel, message: str) -> Any:
    from agents import Agent, RunConfig, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp

    set_tracing_disabled(True)  # the SDK's tracing would export to the vendor's endpoint
    async with MCPServerStreamableHttp(
            name="agentplatform", params={"url": url, "headers": {"Authorization": f"Bearer {key}"},
                                          "timeout": CLIENT_TIMEOUT_SECONDS},
            client_session_timeout_seconds=CLIENT_TIMEOUT_SECONDS) as platform:
        agent = Agent(name="support", instructions="Help with orders.", mcp_servers=[platform], model=model.model)
        return await Runner.run(agent, message, run_config=RunConfig(tracing_disabled=True), max_turns=6)


def test_an_agent_reads_pending_then_its_retry_after_the_confirmation_runs_once(mcp_live, requester):
    key = issue_key(requester, name="support agent (Agents SDK Runner)")
    cancel_id = order_id("acme", "0001")
    arguments = {"order_id": cancel_id, "reason": "the customer changed their mind"}

    # given: the agent lists PAID orders and asks to cancel one; the platform answers pending
    asking = ScriptedModel([("call", "list_orders", {"status": "PAID"}), ("call", "cancel_order", arguments),
                            ("say", "I asked; it waits for your confirmation.")])
    first = asyncio.run(_run_agent(mcp_live.url, key, asking, f"Cancel {cancel_id}"))

    assert first.final_output == "I asked; it waits for your confirmation."
    assert {"list_orders", "cancel_order", "refund_order"} <= set(asking.inputs[0]["tools"])
    listed, pending = tool_outputs(asking)
    assert cancel_id in listed
    # the model reads that nothing ran yet and that it should retry the same call
    assert "pending" in pending.lower() and "retry" in pending.lower() and cancel_id in pending
    assert Order.objects.get(tenant=requester.tenant, order_id=cancel_id).status == Order.Status.PAID
    request_id = ConfirmationRequest.objects.get(tenant=requester.tenant, tool_name="cancel_order").pk

    # when: the requester confirms, and the agent retries the same call
    token = requester_actions.confirmation_issue_token(request_id=request_id, user=requester)
    requester_actions.confirmation_confirm(token=token, user=requester)
    retrying = ScriptedModel([("call", "cancel_order", arguments), ("say", "Cancelled.")])
    second = asyncio.run(_run_agent(mcp_live.url, key, retrying, "Did it go through?"))

    # then: it ran once, and the model read the real outcome
    [done] = tool_outputs(retrying)
    assert second.final_output == "Cancelled." and "CANCELLED" in done
    assert Cancellation.objects.filter(order__tenant=requester.tenant, order__order_id=cancel_id).count() == 1
