"""Every page a person of each role uses, on a phone (390 x 844) and at 1360 px: no sideways
scrolling, and axe finds no serious or critical violation. One pass over the product after a
gated refund, so the pages carry real rows (an inbox line, a card, audit rows, chart bars)."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD, order_id
from tests.browser.conftest import PHONE, playwright_expect
from tests.browser.test_newcomers import _axe, _no_horizontal_scroll
from tests.web.requester_support import mcp_call, page_url

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# (persona, paths) as each role reaches them from its navigation
PAGES = [
    ("requester", ["/chat/", "/approvals/mine/", "{mine_detail}", "{mine_detail_mcp}"]),
    ("approver1", ["/approvals/", "/approvals/?tab=open", "/approvals/?tab=decided"]),
    ("auditor", ["/audit/", "/approvals/overview/"]),
    ("admin", ["/approvals/overview/", "/api/docs/"]),
]


@pytest.fixture
def waiting_refund(people):
    """A refund of acme that waits for two approvers, so lists are not empty,
    and a cancellation asked over MCP that waits for its requester: {placeholder: the requester's
    page of each}."""
    requester = people["acme"]["requester"]
    outcome = services.chat_send(user=requester, message=f"Refund {order_id('acme', '0003')} amount 50 because damaged")
    over_mcp = mcp_call(requester, "cancel_order", {"order_id": order_id("acme", "0001"), "reason": "changed my mind"})
    return {"mine_detail": page_url(outcome.pending[0].confirmation_id),
            "mine_detail_mcp": page_url(over_mcp.pending.confirmation_id)}


@pytest.mark.parametrize("viewport", ["phone", "desk"])
def test_every_page_fits_and_passes_axe(open_person, people, waiting_refund, viewport):
    expect = playwright_expect()
    options = PHONE if viewport == "phone" else {}
    problems: list[str] = []
    for persona, paths in PAGES:
        user = people["acme"][persona]
        person = open_person(f"{persona}-{viewport}", **options)
        person.sign_in(user.username, DEMO_PASSWORD)
        for path in paths:
            path = path.format(**waiting_refund)
            response = person.page.goto(person.base_url + path)
            assert response is not None and response.status == 200, f"{persona} {path}: {response and response.status}"
            expect(person.page.locator("main, #content").first).to_be_visible()
            try:
                _no_horizontal_scroll(person)
            except AssertionError as error:
                problems.append(f"{persona} {path} ({viewport}): {error}")
            problems += _axe(person, f"{persona}{path.replace('/', '_')}-{viewport}")
        assert not person.console_errors, f"{persona}: {person.console_errors}"
    assert not problems, "\n".join(problems)
