"""Tool search for large catalogs: above the threshold the
model gets `tool_search` instead of every definition; a search sees only the tools offered to this
user in this tenant; what it finds becomes callable and still passes the whole pipeline."""
from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict

from agentplatform.runtime.services import conversation_create
from tests.tools.support import assistant, audit_rows, tool_context
from tools import search
from tools.manager import ToolCallingManager
from tools.registry import ToolSpec


class _City(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str


def _spec(name: str, description: str) -> ToolSpec:
    return ToolSpec(name=name, description=description, parameters=_City, execute=lambda ctx, p: {"city": p.city},
                    risk="LOW", owner="Test team <test@example.com>", version="2.0.0")


TOOLS = {
    "test_weather_forecast": "Weather forecast for a city for the next days. 查询城市天气预报。",
    "test_translate_text": "Translate a text between English and Chinese.",
    "test_exchange_rate": "Currency exchange rate between two currencies today.",
    "test_store_hours": "Opening hours of our stores in a city. 门店营业时间。",
    "test_holiday_calendar": "Public holidays of a city for a year.",
}


@pytest.fixture
def catalog(settings, requester, outsider, install_tool):
    settings.TOOL_SEARCH_THRESHOLD = 3
    for name, description in TOOLS.items():
        install_tool(_spec(name, description), users=[requester])
    # Offered to the globex requester only: acme never finds it.
    install_tool(_spec("test_secret_payroll", "Payroll of every employee in a city."), users=[outsider])


def _names(definitions) -> list[str]:
    return [d["function"]["name"] for d in definitions]


def test_above_the_threshold_the_model_gets_tool_search_and_what_it_found(db, catalog, requester):
    manager = ToolCallingManager()
    ctx = tool_context(requester, conversation_create(user=requester).pk)
    definitions, ctx = manager.resolve(ctx)
    assert _names(definitions) == ["tool_search"]

    found = manager.execute_tool_calls(ctx, assistant(("s1", "tool_search", {"query": "天气预报"})))
    result = found.outcomes[0].result
    assert result.success and result.data["tools"][0]["name"] == "test_weather_forecast"
    assert result.data["tools"][0]["parameters"]["properties"] == {"city": {"type": "string"}}

    definitions, ctx = manager.resolve(ctx, refresh=True)
    assert _names(definitions) == ["tool_search", "test_weather_forecast"]
    # Found is not allowed: the call still passes the pipeline (schema validation here).
    bad = manager.execute_tool_calls(ctx, assistant(("c1", "test_weather_forecast", {"city": "Hangzhou", "x": 1})))
    assert bad.outcomes[0].result.code == "INVALID_ARGUMENTS"
    good = manager.execute_tool_calls(ctx, assistant(("c2", "test_weather_forecast", {"city": "Hangzhou"})))
    assert good.outcomes[0].result.data == {"city": "Hangzhou"}
    assert audit_rows(tool_name="tool_search")[0].masked_arguments == {"query": "天气预报"}


def test_search_sees_only_the_tools_offered_to_this_user_in_this_tenant(db, catalog, requester, outsider):
    manager = ToolCallingManager()
    acme = manager.resolve(tool_context(requester, conversation_create(user=requester).pk))[1]
    payroll = manager.execute_tool_calls(acme, assistant(("s1", "tool_search", {"query": "payroll employee"})))
    assert "test_secret_payroll" not in json.dumps(payroll.outcomes[0].result.data)

    globex = manager.resolve(tool_context(outsider, conversation_create(user=outsider).pk))[1]
    if len(globex.offered) > 3:
        weather = manager.execute_tool_calls(globex, assistant(("s1", "tool_search", {"query": "weather forecast"})))
        assert "test_weather_forecast" not in json.dumps(weather.outcomes[0].result.data)
    else:  # globex is offered few tools: no search, and acme's tools are not among them
        assert "test_weather_forecast" not in globex.offered


def test_below_the_threshold_every_definition_is_sent(db, catalog, requester, settings):
    settings.TOOL_SEARCH_THRESHOLD = 20
    definitions, _ = ToolCallingManager().resolve(tool_context(requester, conversation_create(user=requester).pk))
    assert "tool_search" not in _names(definitions) and "test_weather_forecast" in _names(definitions)


def test_bad_search_arguments_are_invalid(db, catalog, requester):
    manager = ToolCallingManager()
    ctx = manager.resolve(tool_context(requester, conversation_create(user=requester).pk))[1]
    outcome = manager.execute_tool_calls(ctx, assistant(("s1", "tool_search", {"query": "x", "tenant": 2})))
    assert outcome.outcomes[0].result.code == "INVALID_ARGUMENTS"


def test_a_resumed_run_keeps_what_its_searches_found():
    messages = [assistant(("s1", "tool_search", {"query": "weather"})),
                {"role": "tool", "tool_call_id": "s1",
                 "content": json.dumps({"success": True, "data": {"tools": [{"name": "test_weather_forecast"}]}})},
                {"role": "tool", "tool_call_id": "other", "content": json.dumps({"data": {"tools": [{"name": "x"}]}})}]
    assert search.discovered_in(messages) == {"test_weather_forecast"}


def test_owner_and_version_are_in_the_api_and_the_audit_rows(db, catalog, requester, client, settings):
    settings.TOOL_SEARCH_THRESHOLD = 100
    client.force_login(requester)
    tools = {t["name"]: t for t in client.get("/api/v1/tools/").json()}
    assert (tools["test_weather_forecast"]["owner"], tools["test_weather_forecast"]["version"]) == \
        ("Test team <test@example.com>", "2.0.0")
    assert tools["cancel_order"]["owner"] and tools["cancel_order"]["source"] == "local"
    ctx = tool_context(requester, conversation_create(user=requester).pk)
    ToolCallingManager().execute_tool_calls(ctx, assistant(("c1", "test_weather_forecast", {"city": "Hangzhou"})))
    row = audit_rows(tool_name="test_weather_forecast")[-1]
    assert (row.tool_owner, row.tool_version) == ("Test team <test@example.com>", "2.0.0")
