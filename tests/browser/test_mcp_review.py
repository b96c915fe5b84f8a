"""In Chromium: a platform operator reviews a remote tool on the review page, which shows hidden
characters as visible, marked `\\u{…}` and refuses a review of a definition that changed after the
page was shown (docs/remote_tools.md). Screenshots go to test-artifacts/browser/."""
from __future__ import annotations

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from mcp_sources import services as mcp_services
from mcp_sources.client import Listing
from mcp_sources.models import McpTool
from mcp_sources.services import server_discover
from tests.browser.test_newcomers import _axe
from tests.mcp_sources.conftest import make_server
from tests.mcp_sources.test_review_integrity import SCHEMA_V2, TAGS, remote
from tools.models import Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_operator_sees_hidden_characters_and_a_stale_review_is_refused(open_person, operator, monkeypatch):
    from playwright.sync_api import expect

    listed = [remote(), remote(name="forecast", description="Forecast." + TAGS)]
    monkeypatch.setattr(mcp_services, "list_tools", lambda config: Listing(
        protocol_version="2025-11-25", server_name="wx", server_version="2.0", tools=list(listed)))
    server = make_server(transport="http", name="wx", url="https://wx.example/mcp")
    server_discover(server_id=server.pk)
    weather, forecast = McpTool.objects.get(remote_name="weather"), McpTool.objects.get(remote_name="forecast")

    person = open_person("operator")
    person.sign_in(operator.username, DEMO_PASSWORD, next_path="/admin/")
    # the refused tool's page: every tag character visible as a marked escape
    person.goto(f"/admin/mcp_sources/mcptool/{forecast.pk}/change/")
    marks = person.page.locator("mark.hidden-char")
    expect(marks.first).to_be_visible()
    expect(marks.first).to_have_text("\\u{E0049}")
    assert marks.count() >= 50
    expect(person.page.locator("body")).to_contain_text("refused at discovery")
    person.shot("0-refused-tool")
    assert _axe(person, "mcp-tool") == []  # the marked escapes keep enough contrast

    # the review page of the clean tool, then the server changes it before the click
    person.goto("/admin/mcp_sources/mcptool/")
    person.page.locator(f'input[name="_selected_action"][value="{weather.pk}"]').check()
    person.page.select_option('select[name="action"]', "review_and_enable")
    person.page.get_by_role("button", name="Go").click()
    expect(person.page.locator("body")).to_contain_text("What the model will read")
    expect(person.page.locator("body")).to_contain_text("City name")
    person.shot("1-review-page")
    assert _axe(person, "mcp-review") == []
    listed[0] = remote(schema=SCHEMA_V2)
    server_discover(server_id=server.pk)
    person.page.get_by_role("button", name="Approve what is shown and enable / 批准并启用").click()
    expect(person.page.locator(".messagelist")).to_contain_text("changed since it was shown to you")
    person.shot("2-refused-review")
    assert Tool.objects.get(name="wx__weather").enabled is False

    # a fresh look shows the new parameter; approving it now works
    person.page.locator(f'input[name="_selected_action"][value="{weather.pk}"]').check()
    person.page.select_option('select[name="action"]', "review_and_enable")
    person.page.get_by_role("button", name="Go").click()
    expect(person.page.locator("body")).to_contain_text("forward_to")
    person.page.get_by_role("button", name="Approve what is shown and enable / 批准并启用").click()
    expect(person.page.locator(".messagelist")).to_contain_text("x__weather reviewed and enabled")  # the admin capitalises a message
    assert Tool.objects.get(name="wx__weather").enabled is True
