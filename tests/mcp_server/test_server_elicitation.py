"""The requester's confirmation of a HIGH call over MCP: an elicitation form where the client
declared the capability (confirmed → the call runs once; declined → cancelled), and "pending" with
how to decide and retry where it did not (or the setting is off)."""
from __future__ import annotations

import mcp_types as types

from tests.mcp_server.conftest import issue_key, mcp_session, run

HIGH = "cancel_order"
ORDER = "A202607290001"
ARGS = {"order_id": ORDER, "reason": "customer changed their mind"}


def _calls(url: str, key: str, times: int, answer: types.ElicitResult | None = None):
    """Make the HIGH call `times` times in one session; returns (results, the forms shown)."""
    shown: list[types.ElicitRequestParams] = []

    async def elicit(context, params):
        shown.append(params)
        return answer

    async def go():
        options = {"elicitation_callback": elicit} if answer is not None else {}
        async with mcp_session(url, key, **options) as session:
            return [await session.call_tool(HIGH, ARGS) for _ in range(times)]

    return run(go()), shown


def test_confirmed_by_the_form_runs_once(mcp_live, requester):
    from agentplatform.mcp_server.models import McpCall
    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Cancellation, Order

    accept = types.ElicitResult(action="accept", content={"confirm": True})
    (first, again), shown = _calls(mcp_live.url, issue_key(requester), 2, accept)

    assert len(shown) == 1 and ORDER in shown[0].message
    assert shown[0].requested_schema["properties"]["confirm"]["type"] == "boolean"
    assert first.is_error is False and "status" not in first.structured_content
    assert again.is_error is False  # the retry replays the stored result
    assert Cancellation.objects.count() == 1 and Order.objects.get(order_id=ORDER).status == "CANCELLED"
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.CONSUMED
    assert McpCall.objects.get().status == McpCall.Status.COMPLETED


def test_declined_form_cancels_the_call(mcp_live, requester):
    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Cancellation, Order

    (result,), shown = _calls(mcp_live.url, issue_key(requester), 1, types.ElicitResult(action="decline"))

    assert len(shown) == 1
    assert result.is_error is True and result.structured_content["code"] == "REJECTED"
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.CANCELLED
    assert Cancellation.objects.count() == 0 and Order.objects.get(order_id=ORDER).status == "PAID"


def test_accepted_without_confirm_cancels_the_call(mcp_live, requester):
    from tools.catalog.models import Cancellation

    (result,), _ = _calls(mcp_live.url, issue_key(requester), 1,
                          types.ElicitResult(action="accept", content={"confirm": False}))
    assert result.is_error is True and result.structured_content["code"] == "REJECTED"
    assert Cancellation.objects.count() == 0


def test_a_client_without_elicitation_gets_pending_and_retries_without_a_second_request(mcp_live, requester):
    from agentplatform.mcp_server.models import McpCall
    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Cancellation

    (first, retry), _ = _calls(mcp_live.url, issue_key(requester), 2)

    for result in (first, retry):
        assert result.is_error is False
        pending = result.structured_content
        assert pending["status"] == "pending" and pending["needs"] == "requester"
        assert pending["url"].startswith("http") and pending["request_id"] and pending["expires_at"]
        assert "retry this same call" in result.content[0].text
    assert first.structured_content["request_id"] == retry.structured_content["request_id"]
    assert ConfirmationRequest.objects.count() == 1 and McpCall.objects.count() == 1
    assert Cancellation.objects.count() == 0


def test_the_setting_off_means_no_form(mcp_live, requester, settings):
    from tools.catalog.models import Cancellation

    settings.MCP_CONFIRM_BY_ELICITATION = False
    (result,), shown = _calls(mcp_live.url, issue_key(requester), 1,
                              types.ElicitResult(action="accept", content={"confirm": True}))
    assert shown == []
    assert result.structured_content["status"] == "pending"
    assert Cancellation.objects.count() == 0


def test_an_unanswered_form_leaves_the_call_pending(mcp_live, requester, settings):
    import anyio

    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Cancellation

    settings.MCP_ELICITATION_TIMEOUT_SECONDS = 0.5
    shown = []

    async def slow(context, params):
        shown.append(params)
        await anyio.sleep(3)
        return types.ElicitResult(action="accept", content={"confirm": True})

    key = issue_key(requester)

    async def go():
        async with mcp_session(mcp_live.url, key, elicitation_callback=slow) as session:
            return await session.call_tool(HIGH, ARGS)

    result = run(go())
    assert len(shown) == 1
    assert result.is_error is False and result.structured_content["status"] == "pending"
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.PENDING
    assert Cancellation.objects.count() == 0
