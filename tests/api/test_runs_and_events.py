"""GET /api/v1/runs/{id}/ and its Server-Sent Events: order, live following, Last-Event-ID replay."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run, RunEvent
from approvals import approver_actions
from tests.api.conftest import assert_error


@pytest.fixture(autouse=True)
def _fast_streams(settings):
    settings.API_SSE_POLL_SECONDS = 0.01
    settings.API_SSE_MAX_SECONDS = 10
    settings.API_SSE_HEARTBEAT_SECONDS = 15


def sse_messages(response) -> Iterator[dict]:
    """Parse a text/event-stream body as it arrives: one dict per event or comment block."""
    buffer = b""
    for chunk in response.streaming_content:
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            message: dict = {}
            for line in block.decode("utf-8").split("\n"):
                field, _, value = line.partition(":")
                message.setdefault("comment" if field == "" else field, value.lstrip(" "))
            yield message


def events_of(response) -> list[dict]:
    return [m for m in sse_messages(response) if "event" in m]


def stored(run: Run) -> list[tuple[int, str, dict]]:
    return [(e.seq, e.type, e.payload) for e in RunEvent.objects.filter(run=run).order_by("seq")]


def test_run_detail(api, requester):
    outcome = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?")
    body = api(requester).get(f"/api/v1/runs/{outcome.run.pk}/").json()
    assert body["status"] == "COMPLETED" and body["answer"] == outcome.run.final_answer
    assert body["pending"] == [] and body["last_event_seq"] == stored(outcome.run)[-1][0]


def test_run_detail_lists_what_it_waits_for_without_tokens(api, requester, approver1, refund_pending):
    approver_actions.confirmation_approve(request_id=refund_pending.pending[0].confirmation_id, approver=approver1)
    body = api(requester).get(f"/api/v1/runs/{refund_pending.run.pk}/").json()
    assert body["status"] == "AWAITING_CONFIRMATION" and body["answer"] is None
    [pending] = body["pending"]
    assert (pending["needs"], pending["approvals"], pending["quorum"], pending["status"]) == \
        ("approvers", 1, 2, "PENDING")
    assert "token" not in pending


def test_runs_of_other_users_and_tenants_are_404(api, requester, approver1, outsider):
    run = services.chat_send(user=requester, message="How many SKU-10001?").run
    for other in (approver1, outsider):
        assert_error(api(other).get(f"/api/v1/runs/{run.pk}/"), 404, "NOT_FOUND")
        assert_error(api(other).get(f"/api/v1/runs/{run.pk}/events/"), 404, "NOT_FOUND")


def test_stream_sends_every_event_in_order_then_ends_after_done(api, requester):
    run = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?").run
    response = api(requester).get(f"/api/v1/runs/{run.pk}/events/", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream") and response["Cache-Control"] == "no-cache"
    received = [(int(m["id"]), m["event"], json.loads(m["data"])) for m in events_of(response)]
    assert received == stored(run)
    assert received[-1][1] == "DONE" and [seq for seq, *_ in received] == list(range(1, len(received) + 1))


def test_stream_follows_a_waiting_run_live_until_done(api, requester, cancel_pending):
    run, token = cancel_pending.run, cancel_pending.pending[0].token
    response = api(requester).get(f"/api/v1/runs/{run.pk}/events/")
    types = []
    for message in sse_messages(response):
        if "event" not in message:
            continue
        types.append(message["event"])
        if message["event"] == "CONFIRMATION_REQUIRED":
            payload = json.loads(message["data"])
            assert "token" not in payload and payload["needs"] == "requester"
            # while the client waits on the stream, the requester confirms elsewhere
            services.chat_send(user=requester, message="yes", conversation_id=run.conversation_id,
                               confirmation_token=token)
    assert types == [t for _, t, _ in stored(run)]
    assert types[-1] == "DONE" and "TOOL_EXECUTION_COMPLETED" in types[types.index("CONFIRMATION_REQUIRED"):]


def test_reconnecting_with_last_event_id_receives_only_what_was_missed(api, requester):
    run = services.chat_send(user=requester, message="How many SKU-10001 in WH-HZ-01?").run
    all_events = stored(run)
    assert len(all_events) >= 3
    client = api(requester)
    # given: a client that read two events and lost the connection
    first = client.get(f"/api/v1/runs/{run.pk}/events/")
    messages = sse_messages(first)
    seen = [next(m for m in messages if "event" in m) for _ in range(2)]
    messages.close()  # the client stops reading (the test client then closes the response itself)
    # when: it reconnects with the last id it saw
    again = client.get(f"/api/v1/runs/{run.pk}/events/", HTTP_LAST_EVENT_ID=seen[-1]["id"])
    # then: exactly the rest, in order
    assert [int(m["id"]) for m in events_of(again)] == [seq for seq, *_ in all_events[2:]]
    # the query parameter does the same for a first connection
    by_query = client.get(f"/api/v1/runs/{run.pk}/events/?last_event_id=1")
    assert [int(m["id"]) for m in events_of(by_query)] == [seq for seq, *_ in all_events[1:]]
    # and the header wins over the query parameter (an EventSource reconnecting keeps its URL)
    both = client.get(f"/api/v1/runs/{run.pk}/events/?last_event_id=1", HTTP_LAST_EVENT_ID=str(len(all_events) - 1))
    assert [m["event"] for m in events_of(both)] == ["DONE"]


def test_nothing_left_of_a_finished_run_is_204_so_eventsource_stops(api, requester):
    run = services.chat_send(user=requester, message="How many SKU-10001?").run
    last = stored(run)[-1][0]
    response = api(requester).get(f"/api/v1/runs/{run.pk}/events/", HTTP_LAST_EVENT_ID=str(last))
    assert response.status_code == 204


def test_an_idle_stream_sends_keep_alives_and_ends_at_its_time_bound(api, requester, cancel_pending, settings):
    settings.API_SSE_MAX_SECONDS = 1  # the first idle poll comes long before
    settings.API_SSE_HEARTBEAT_SECONDS = 0
    response = api(requester).get(f"/api/v1/runs/{cancel_pending.run.pk}/events/")
    messages = list(sse_messages(response))
    assert messages[0] == {"retry": "2000"}
    assert [m["event"] for m in messages if "event" in m] == [t for _, t, _ in stored(cancel_pending.run)]
    assert any(m.get("comment") == "keep-alive" for m in messages)
    assert "DONE" not in [m.get("event") for m in messages]  # still waiting: the client reconnects


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "99999999999"])
def test_a_bad_last_event_id_is_400_as_json(api, requester, value):
    run = services.chat_send(user=requester, message="How many SKU-10001?").run
    response = api(requester).get(f"/api/v1/runs/{run.pk}/events/", HTTP_LAST_EVENT_ID=value,
                                  HTTP_ACCEPT="text/event-stream")
    assert_error(response, 400, "INVALID_ARGUMENTS")


def test_stream_errors_are_json_even_when_sse_was_asked(api, requester):
    response = api(requester).get(f"/api/v1/runs/{uuid.uuid4()}/events/", HTTP_ACCEPT="text/event-stream")
    assert_error(response, 404, "NOT_FOUND")
    assert_error(api().get(f"/api/v1/runs/{uuid.uuid4()}/events/", HTTP_ACCEPT="text/event-stream"),
                 401, "NOT_AUTHENTICATED")
