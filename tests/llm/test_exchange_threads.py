"""The model-call threads (agentplatform.llm.exchange): a call reuses an idle thread instead of
starting one, and a call whose exchange hangs past its deadline never delays the next call."""
from __future__ import annotations

import threading
import time

import httpx2
import openai
import pytest

from agentplatform.llm.client import complete
from agentplatform.llm.errors import ModelTimeout
from agentplatform.llm.offline import OfflineModelTransport

MESSAGES = [{"role": "user", "content": "hello"}]


class RecordingTransport(OfflineModelTransport):
    """The offline planner, noting the thread of every exchange; `hold` makes the next exchange
    wait until it is set (a provider that stopped answering)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.hold: threading.Event | None = None

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.threads.append(threading.current_thread())
        hold, self.hold = self.hold, None
        if hold is not None:
            hold.wait(10)
        return super().handle_request(request)


@pytest.fixture
def recorded():
    transport = RecordingTransport()
    client = openai.OpenAI(api_key="offline", base_url="http://offline-model.invalid/v1", max_retries=0,
                           timeout=10, http_client=httpx2.Client(transport=transport))
    yield transport, client
    client.close()


def test_consecutive_calls_run_on_one_reused_thread(recorded):
    transport, client = recorded
    for _ in range(3):
        turn = complete(messages=MESSAGES, tools=[], client=client, model="offline-planner", stream=True)
        assert turn.content
    assert len(transport.threads) == 3
    assert len(set(transport.threads)) == 1  # one thread, reused: none started per call
    assert threading.current_thread() not in transport.threads  # never the caller's thread (its deadline)


def test_a_call_stuck_past_its_deadline_does_not_delay_the_next(recorded):
    transport, client = recorded
    release = threading.Event()
    transport.hold = release
    started = time.monotonic()
    with pytest.raises(ModelTimeout):
        complete(messages=MESSAGES, tools=[], client=client, model="offline-planner", deadline_seconds=0.3)
    assert time.monotonic() - started < 3
    try:
        started = time.monotonic()
        turn = complete(messages=MESSAGES, tools=[], client=client, model="offline-planner", deadline_seconds=5)
        assert turn.content and time.monotonic() - started < 3
        stuck, fresh = transport.threads[-2:]
        assert stuck is not fresh  # the abandoned exchange still holds its thread: the next call got another
    finally:
        release.set()


def test_the_offline_model_is_answered_in_the_callers_thread(offline_settings, monkeypatch):
    """The embedded offline model has no network under it: its exchange runs in the caller's thread
    (the same SDK request, SSE stream and assembly); any other client keeps the model-call thread."""
    from agentplatform.llm import factory

    threads: list[threading.Thread] = []
    answer = OfflineModelTransport.handle_request
    marker = "A202607299876 because it is late"  # only this test's request: an exchange an earlier test
    # abandoned may still answer its own in a model-call thread meanwhile

    def record(self, request):
        if marker.encode() in request.read():
            threads.append(threading.current_thread())
        return answer(self, request)

    monkeypatch.setattr(OfflineModelTransport, "handle_request", record)
    client = factory.get_client()
    assert factory.in_process(client)
    turn = complete(messages=[{"role": "user", "content": f"cancel {marker}"}], tools=[], stream=True)
    assert [c.name for c in turn.tool_calls] == ["cancel_order"]
    assert threads == [threading.current_thread()]
    other = openai.OpenAI(api_key="offline", base_url="http://offline-model.invalid/v1",
                          http_client=httpx2.Client(transport=OfflineModelTransport()))
    assert not factory.in_process(other)
    other.close()
