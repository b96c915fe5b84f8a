"""Server-Sent Events in-process: the async stream served to ASGI requests (Django's AsyncClient),
on whichever database the suite runs: LISTEN/NOTIFY on PostgreSQL, polling on SQLite."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.api.sse_hub import get_hub
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Run
from agentplatform.runtime.services import conversation_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run_and_token(requester):
    conversation = conversation_create(user=requester, title="async")
    run = Run.objects.create(tenant_id=requester.tenant_id, user=requester, conversation=conversation,
                             request_id="async", state={"messages": []})
    EventRecorder(run).emit("TOOL_CALL_STARTED", {"tool": "t", "tool_call_id": "c0"})
    return run, api_token_issue(user=requester)


def test_an_asgi_stream_replays_then_follows_new_events_then_ends(run_and_token, settings):
    from django.test import AsyncClient

    settings.API_SSE_POLL_SECONDS = 0.05
    settings.API_SSE_HEARTBEAT_SECONDS = 0.2
    run, token = run_and_token

    def write_rest() -> None:
        recorder = EventRecorder(run)
        recorder.emit("TOOL_EXECUTION_COMPLETED", {"tool": "t", "tool_call_id": "c0", "success": True, "code": "OK"})
        recorder.emit("DONE", {"status": "COMPLETED"})

    async def scenario() -> tuple[str, int, bool]:
        client = AsyncClient()
        response = await client.get(f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Token {token}",
                                    "Accept": "text/event-stream"})
        assert response.status_code == 200 and response.is_async  # the async generator, not the polling one
        chunks, wrote = [], False
        iterator = response.streaming_content.__aiter__()
        while True:
            chunk = (await asyncio.wait_for(iterator.__anext__(), 10)).decode()
            chunks.append(chunk)
            if chunk.startswith(": keep-alive") and not wrote:
                await sync_to_async(write_rest, thread_sensitive=False)()  # as a worker would, elsewhere
                wrote = True
            if "event: DONE" in chunk:
                break
        async for chunk in iterator:  # the stream ends by itself after DONE
            chunks.append(chunk.decode())
        hub = get_hub()
        return "".join(chunks), len(hub.subscriptions), wrote

    text, open_subscriptions, wrote = async_to_sync(scenario)()
    assert wrote
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    assert ids == [1, 2, 3]  # the replayed event, then the two written while the stream was open
    assert ": keep-alive" in text
    assert open_subscriptions == 0  # the stream left the hub when it ended


def test_an_asgi_stream_of_a_finished_run_with_nothing_left_is_204(run_and_token):
    from django.test import AsyncClient

    run, token = run_and_token
    EventRecorder(run).emit("DONE", {"status": "COMPLETED"})
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)

    async def scenario():
        return await AsyncClient().get(f"/api/v1/runs/{run.pk}/events/?last_event_id=2",
                                       headers={"Authorization": f"Token {token}", "Accept": "text/event-stream"})

    assert async_to_sync(scenario)().status_code == 204
