"""An agent's HIGH call over MCP waits for its requester: in Chromium the requester opens the page
the "pending" answer pointed to, sees the call marked "via MCP", confirms it, and, after the
agent's retry, sees that it ran, once.

Screenshots (test-artifacts/browser/): requester-mcp-waiting.png, requester-mcp-ran.png.
"""
from __future__ import annotations

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.models import ConfirmationRequest
from tests.browser.conftest import named_shot, playwright_expect
from tests.web.conftest import CANCEL_ORDER
from tests.mcp_server.calls_support import principal_of
from tests.web.requester_support import page_url
from tools.catalog.models import Cancellation, Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEY_NAME = "ide-assistant"

ARGUMENTS = {"order_id": CANCEL_ORDER, "reason": "the customer changed their mind"}


def test_the_requester_confirms_a_call_made_over_mcp_and_sees_it_ran(open_person, requester):
    from agentplatform.mcp_server import calls

    expect = playwright_expect()
    principal, _ = principal_of(requester, name=KEY_NAME)
    answer = calls.call_tool(principal, name="cancel_order", arguments=ARGUMENTS)  # the agent's call over MCP
    assert answer.state == "pending" and answer.pending["needs"] == "requester"
    request_id = answer.pending["request_id"]
    url = page_url(request_id)
    assert answer.pending["url"].endswith(url)  # where the pending answer sends the person

    alice = open_person("requester")
    alice.sign_in(requester.username, DEMO_PASSWORD, next_path=url)
    page = alice.page
    card = page.locator("[data-testid=my-request-card]")
    expect(card.locator("h1")).to_have_text("Cancel an order / 取消订单")
    expect(card.locator("[data-testid=via-mcp]")).to_contain_text(f"via MCP · {KEY_NAME}")
    expect(card.locator("[data-testid=standing]")).to_have_text("Waiting for your confirmation. / 等待您的确认。")
    expect(card.locator("[data-testid=arguments]")).to_contain_text(CANCEL_ORDER)
    assert "ct_" not in page.content()  # no confirmation token reaches the page
    named_shot(alice, "requester-mcp-waiting.png")

    card.locator("[data-testid=confirm]").click()

    expect(page.locator("[data-testid=flash]").first).to_contain_text("Confirmed. / 已确认。")
    expect(card.locator("[data-testid=status]")).to_have_attribute("data-outcome", "CONFIRMED")
    expect(card.locator("[data-testid=confirm]")).to_have_count(0)
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONFIRMED
    assert not Cancellation.objects.exists()  # nothing ran before the agent asked again

    # The agent retries the same call twice: it runs once, then the stored answer is replayed.
    ran = calls.call_tool(principal, name="cancel_order", arguments=ARGUMENTS)
    assert ran.state == "completed" and ran.result["success"]
    assert calls.call_tool(principal, name="cancel_order", arguments=ARGUMENTS).state == "completed"
    page.reload()

    expect(card.locator("[data-testid=status]")).to_have_attribute("data-outcome", "EXECUTED")
    expect(card.locator("[data-testid=standing]")).to_have_text("It ran. / 已执行。")
    expect(card.locator("[data-testid=decided-by]")).to_contain_text(f"{requester.username} (requester)")
    named_shot(alice, "requester-mcp-ran.png")
    assert Cancellation.objects.filter(order__order_id=CANCEL_ORDER).count() == 1
    assert Order.objects.get(order_id=CANCEL_ORDER).status == "CANCELLED"
    assert not alice.console_errors, alice.console_errors
