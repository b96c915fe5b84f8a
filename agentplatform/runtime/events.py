"""Persisting a run's ordered events (MODEL_TEXT, tool events, FINAL_TEXT or ERROR, then DONE)."""
from __future__ import annotations

import time
from typing import Any, Callable

from django.db import IntegrityError, connection
from django.db.models import Max
from django.utils import timezone

from core.sql.statements import insert_row
from core.sql.transactions import release_connection_while_waiting
from core.redaction.text import mask_json, mask_text, split_open_tail
from agentplatform.runtime.models import Run, RunEvent

# Streamed model text is stored in MODEL_TEXT events of what arrived in the last 50 ms (and at
# most 4,000 characters each): live enough for a person reading along, and a fast answer costs one
# INSERT rather than one per few tokens.
MODEL_TEXT_FLUSH_SECONDS = 0.05
MODEL_TEXT_MAX_CHARS = 4000
_CONTEXT_CHARS = 200  # more than a card number and its labels (redaction._NEAR)
_monotonic = time.monotonic  # replaced by tests


class EventRecorder:
    """Appends RunEvents with consecutive sequence numbers for one run.

    The holder of the run's claim writes events, so the next seq is kept in memory; when a holder
    that lost its lease still writes one, the (run, seq) unique constraint refuses the duplicate
    seq and the recorder continues after the highest stored seq (sequence numbers never collide).
    `listener(event)` is called after each event is stored (the CLI prints them).

    Inside a step of the run (`hold()`, one transaction per step: runtime.step) events are buffered,
    written together in one multi-row INSERT when the step ends, and shown to the listener only
    after that transaction committed: a client is never told about an event a rollback undid.
    """

    def __init__(self, run: Run, listener: Callable[[RunEvent], None] | None = None, *,
                 last_seq: int | None = None) -> None:
        """last_seq: the run's highest stored seq when the caller read it already (else queried)."""
        self.run = run
        self.listener = listener
        if last_seq is None:
            last_seq = run.events.aggregate(m=Max("seq"))["m"] or 0
        self.seq = last_seq
        self._text = ""
        self._said = ""  # the end of the text stored so far, masked: context for the next piece
        self._stored_at = _monotonic()
        self._held: list[RunEvent] | None = None  # buffered inside a step (see `held`)
        self._told: list[RunEvent] = []  # written, not yet shown to the listener

    def hold(self) -> None:
        """Start buffering events (a step of the run began its transaction)."""
        if self._held is None:
            self._held = []

    def held_into(self, together) -> int | None:
        """Add the buffered events to `together` (core.sql.batches.Together: the step's writes in
        one statement, inside its transaction); returns the index of their ids in its results, or
        None when none are held. `held_stored(ids)` is called with those ids once sent; they are
        shown to the listener by `tell` once the step committed. A seq collision (a lost holder)
        raises IntegrityError when sent: the step rolls back."""
        if not self._held:
            return None
        return together.insert(RunEvent, [{"run_id": self.run.pk, "seq": e.seq, "type": e.type, "payload": e.payload,
                                           "created_at": e.created_at} for e in self._held], returning="id")

    def held_stored(self, ids: list[int]) -> None:
        """The buffered events were written with these ids (in order); they wait for `tell`."""
        held, self._held = self._held or [], None
        for event, pk in zip(held, ids):
            event.id = pk
            event._state.adding = False
        self._told.extend(held)

    def drop_held(self, seq: int) -> None:
        """Forget the buffered and untold events of a step that rolled back; seq: the last seq
        stored before the step began."""
        self._held, self._told, self.seq = None, [], seq

    def tell(self) -> None:
        """Show the committed events to the listener, in order."""
        told, self._told = self._told, []
        if self.listener is not None:
            for event in told:
                self.listener(event)

    def emit(self, type_: str, payload: dict[str, Any] | None = None) -> RunEvent:
        """Store one event of `type_` with a JSON payload (must not contain a token). Returns it."""
        if type_ != RunEvent.Type.MODEL_TEXT:
            self.flush_text()
        return self._store(type_, payload or {})

    def text(self, delta: str) -> None:
        """Buffer streamed model text. It is stored as one MODEL_TEXT event once 50 ms passed since
        the last stored event (or 4,000 characters are waiting), and by `flush_text` at the end."""
        self._text += delta
        if _monotonic() - self._stored_at >= MODEL_TEXT_FLUSH_SECONDS or len(self._text) >= MODEL_TEXT_MAX_CHARS:
            self.flush_text(final=len(self._text) >= MODEL_TEXT_MAX_CHARS)
            # Still inside the model call: the pooled connection goes back until the next flush.
            release_connection_while_waiting()

    def flush_text(self, *, final: bool = True) -> None:
        """Store the buffered text. Not final (a timed flush): a tail that may be the start of a
        number or token cut by streaming waits for the next delta, so masking sees it whole."""
        if self._text:
            text, self._text = (self._text, "") if final else split_open_tail(self._text)
            if text:
                # A card named in an earlier piece makes "exp 12/29" in this one card data.
                text = mask_text(text, context=self._said)
                self._said = (self._said + text)[-_CONTEXT_CHARS:]
                self._store(RunEvent.Type.MODEL_TEXT, {"text": text})

    def _store(self, type_: str, payload: dict[str, Any]) -> RunEvent:
        payload = mask_json(payload)  # every run event leaves the platform (SSE, API): masked
        self.seq += 1
        event = RunEvent(run=self.run, seq=self.seq, type=type_, payload=payload, created_at=timezone.now())
        if self._held is not None:
            self._held.append(event)
            self._stored_at = _monotonic()
            return event
        for attempt in range(3):
            try:
                # One INSERT without the ORM's compile: a resumed run writes about six events per cycle.
                event.id = insert_row(RunEvent, {"run_id": self.run.pk, "seq": event.seq, "type": type_,
                                                 "payload": payload, "created_at": event.created_at}, returning="id")
                break
            except IntegrityError:
                # Another holder (a recovery that took the run over from a slow holder) wrote this
                # seq: continue after the highest stored one instead of crashing either holder.
                if attempt == 2 or connection.in_atomic_block:
                    raise
                self.seq = (self.run.events.aggregate(m=Max("seq"))["m"] or 0) + 1
                event.seq = self.seq
        event._state.adding = False
        self._stored_at = _monotonic()
        if self.listener is not None:
            self.listener(event)
        return event
