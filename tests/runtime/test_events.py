"""EventRecorder: consecutive seqs, and streamed text stored by time slices, not per token."""
from __future__ import annotations

import pytest

from agentplatform.runtime import events
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.services import conversation_create


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(events, "_monotonic", fake)
    return fake


@pytest.fixture
def run(requester) -> Run:
    conversation = conversation_create(user=requester)
    return Run.objects.create(tenant=requester.tenant, user=requester, conversation=conversation, request_id="r")


def _stored(run: Run) -> list[tuple[int, str, dict]]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type", "payload"))


def test_text_is_stored_in_50_ms_slices_and_flushed_before_the_next_event(run, clock):
    recorder = EventRecorder(run)
    for at, delta in ((0.010, "Hel"), (0.020, "lo"), (0.070, " wor"), (0.080, "ld")):
        clock.now = 100.0 + at
        recorder.text(delta)
    recorder.emit(RunEvent.Type.FINAL_TEXT, {"text": "Hello world"})

    assert _stored(run) == [
        (1, "MODEL_TEXT", {"text": "Hello wor"}),  # 70 ms after the recorder started: one slice
        (2, "MODEL_TEXT", {"text": "ld"}),  # the rest, before the next event
        (3, "FINAL_TEXT", {"text": "Hello world"}),
    ]


def test_a_fast_answer_is_one_text_event_and_a_huge_burst_is_cut(run, clock):
    recorder = EventRecorder(run)
    recorder.text("The whole answer arrives ")
    recorder.text("within a few milliseconds.")
    recorder.flush_text()
    recorder.text("x" * events.MODEL_TEXT_MAX_CHARS)  # no time passed, but too much is waiting

    texts = [payload["text"] for _, kind, payload in _stored(run) if kind == "MODEL_TEXT"]
    assert texts == ["The whole answer arrives within a few milliseconds.", "x" * events.MODEL_TEXT_MAX_CHARS]


def test_a_second_recorder_continues_the_sequence(run, clock):
    EventRecorder(run).emit(RunEvent.Type.TOOL_CALL_STARTED, {"tool_call_id": "c1", "tool": "t"})
    later = EventRecorder(run)  # reads the last seq
    later.emit(RunEvent.Type.DONE, {"status": "COMPLETED"})
    given = EventRecorder(run, last_seq=2)  # told the last seq by the claim
    given.emit(RunEvent.Type.ERROR, {"code": "X"})

    assert [seq for seq, _, _ in _stored(run)] == [1, 2, 3]
