"""The unit of work of a run: a step, and the run this process holds while it takes steps.

`HeldRun` is a run this process holds (RUNNING with the lease it set): the row, its event
recorder, the step under way and what the quota said of the run's next model call. Code that
drives the run begins a step (`with Step.begin(held) as step:`) and appends to it the run's
messages (`step.append`), its state (`step.save_run`) and its events (`step.emit`); they are
written together, in one statement, when the step ends.

One transaction per step: everything one step writes commits together, with one WAL flush: the
assistant's turn with its confirmation requests, audit rows, events and the run's state; a
consumption with its idempotency record, business change, audit row, tool messages and events; a
final answer with its message, run state and events. Nothing is committed asynchronously, and no
transaction is held across a model call (docs/performance.md).

A step opens its own transaction; outside a step each write is one statement of its own.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable

from django.conf import settings
from django.db import connection, transaction

from core import clock
from core.sql.batches import Together
from core.sql.transactions import transaction_usable
from core.errors import ModelQuotaExceeded
from core.redaction.text import mask_text
from agentplatform.runtime import quota
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.leases import RunClaimLost, lock_held, new_lease, run_save_fenced
from agentplatform.runtime.models import Message, Run, RunEvent
from tools.context import FenceLost


class HeldRun:
    """A run this process holds, and what travels with it from step to step.

    run: the row (its `state` is the run's memory); recorder: its events; fresh_conversation: the
    run's conversation was created with it (no memory and nothing waiting to read); step: the
    step under way, or None; admission: what the quota said of the next model call, counted in
    the step before it (None: not counted yet; True: admitted; ModelQuotaExceeded: refused).
    """

    def __init__(self, run: Run, recorder: EventRecorder, *, fresh_conversation: bool = False,
                 admission: bool | ModelQuotaExceeded | None = None) -> None:
        self.run = run
        self.recorder = recorder
        self.fresh_conversation = fresh_conversation
        self.admission = admission
        self.step: Step | None = None

    def fence_lease(self) -> datetime.datetime | None:
        """The lease the run's row holds for this process now. A save of the current step is still
        held (written at the step's end) and has not changed the row yet: the lease checked is then
        the one the row has, which that save's own compare-and-set checks again."""
        step = self.step
        return step.fence if step is not None and step.values else self.run.lease_expires_at

    def lock(self, consequence: str) -> datetime.datetime | None:
        """Lock the run's row while this process holds it (leases.lock_held); returns the lease."""
        return lock_held(self.run, self.fence_lease(), consequence)

    def save(self, *fields: str, park: bool = False) -> None:
        """Write `fields` of the run now, outside a step, and renew its lease (None once it stops
        running, or when `park`). Fenced: the UPDATE matches only while the row is RUNNING with the
        lease this process set, so a holder that lost its lease to recovery raises RunClaimLost
        instead of overwriting the new holder's state. Inside a step it is the step's `save_run`."""
        if self.step is not None:
            self.step.save_run(*fields)
            return
        run = self.run
        held = run.lease_expires_at
        lease = new_lease() if run.status == Run.Status.RUNNING and not park else None
        now = clock.now()
        values = {name: getattr(run, name) for name in fields if name not in ("lease_expires_at", "updated_at")}
        run_save_fenced(run, {**values, "lease_expires_at": lease, "updated_at": now}, held=held)
        run.lease_expires_at, run.updated_at = lease, now

    def admitted(self, admit: Callable[[], int]) -> None:
        """Keep what `admit()` (the quota's count or check) said of the next model call."""
        try:
            admit()
        except ModelQuotaExceeded as error:
            self.admission = error
        else:
            self.admission = True

    def take_admission(self) -> None:
        """Before a model call: use the admission counted in the step before it, or count it now.
        Raises ModelQuotaExceeded past the tenant's budget."""
        admitted, self.admission = self.admission, None
        if admitted is None:
            quota.model_call_admit(tenant_id=self.run.tenant_id)  # the tenant's daily budget (429 past it)
        elif isinstance(admitted, Exception):
            raise admitted


class Step:
    """One step of a held run: a transaction, and the messages, run values and events written
    together in one statement when it ends (core.sql.batches.Together).

    Events emitted inside the step are shown to the listener only after the commit. On the way out:
    - a lost fence (RunClaimLost/FenceLost), or a database error that left the transaction
      aborted, rolls the whole step back: a holder that lost the run leaves nothing behind, the
      new holder does the step itself;
    - any other exception (a refusal raised to the caller, a tool error propagated by
      TOOLS_PROPAGATE_EXCEPTIONS, a database error a savepoint contained) keeps what the step
      wrote (the audit rows of the refusal or failure) and then re-raises; the caller then ends
      the run in a step of its own;
    - a commit hook (`transaction.on_commit`, e.g. a tool's) that raises after the COMMIT leaves
      the step committed: its events are told, the run keeps its new lease, the error propagates.
    A step begun inside a step is part of the outer one.

    messages: Message rows to insert; values: the run's columns to update; fence: the lease the
    run's row held when the step began to change it (the fence of that UPDATE); admit: the run's
    next model call is counted against the tenant's quota with these writes.
    """

    def __init__(self, held: HeldRun) -> None:
        self.held = held
        self.outer = False
        self.messages: list[dict[str, Any]] = []
        self.values: dict[str, Any] = {}
        self.fence: Any = None
        self.admit = False

    @classmethod
    def begin(cls, held: HeldRun) -> "Step":
        """A step of `held`, to use as a context manager (`with Step.begin(held) as step:`); inside
        another step of the same run it is that step."""
        return cls(held)

    def emit(self, type_: str, payload: dict[str, Any] | None = None) -> RunEvent:
        """Record one event of the run, written with the step's end and told after its commit."""
        return self.held.recorder.emit(type_, payload)

    def save_run(self, *fields: str) -> None:
        """Write `fields` of the run with the step's end and renew its lease (None once it stops
        running). Fenced by the lease the row held when the step first saved the run: the UPDATE
        matches only while the row is RUNNING with it, so a holder that lost its lease to recovery
        raises RunClaimLost (the step rolls back) instead of overwriting the new holder's state."""
        run = self.held.run
        if not self.values:
            self.fence = run.lease_expires_at
        lease = new_lease() if run.status == Run.Status.RUNNING else None
        now = clock.now()
        values = {name: getattr(run, name) for name in fields if name not in ("lease_expires_at", "updated_at")}
        self.values.update({**values, "lease_expires_at": lease, "updated_at": now})
        run.lease_expires_at, run.updated_at = lease, now

    def append(self, message: dict[str, Any]) -> None:
        """Append `message` (OpenAI wire format) to the run's memory; an assistant or tool message
        is also stored as a Message of the run."""
        if isinstance(message.get("content"), str):
            # Kept in the run's memory (sent to the model again) and stored: masked. Tool-call
            # arguments stay as proposed: the pipeline hashes them against the confirmation's binding.
            message = {**message, "content": mask_text(message["content"])}
        self.held.run.state.setdefault("messages", []).append(message)
        if message["role"] in ("assistant", "tool"):
            self.add_message(role=message["role"], content=message.get("content") or "",
                             tool_calls=message.get("tool_calls"), tool_call_id=message.get("tool_call_id", ""),
                             in_memory=settings.AGENT_MEMORY_FULL_TOOL_TRACE)

    def add_message(self, *, role: str, content: str, in_memory: bool, tool_calls: Any = None,
                    tool_call_id: str = "") -> None:
        """Store one Message of the run with the step's end (one row of its multi-row INSERT)."""
        content = mask_text(content)  # what the model wrote is shown to people and kept: masked
        run = self.held.run
        self.messages.append({"conversation_id": run.conversation_id, "run_id": run.pk, "role": role,
                              "content": content, "tool_calls": tool_calls, "tool_call_id": tool_call_id,
                              "in_memory": in_memory})

    def admit_next_call(self) -> None:
        """Count the run's next model call against the tenant's daily budget with the step's
        writes (no statement and no commit of its own right before the call). A refusal is kept on
        the held run and raised where the model call would be made (`HeldRun.take_admission`)."""
        self.admit = True

    def lock(self, consequence: str) -> datetime.datetime | None:
        """Lock the run's row in the step's transaction while this process holds it; see
        leases.lock_held. Returns the lease."""
        return self.held.lock(consequence)

    def __enter__(self) -> "Step":
        if self.held.step is not None:
            return self.held.step  # already inside a step: its transaction and its events
        self.outer = True
        recorder = self.held.recorder
        self.seq = recorder.seq
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        # The first commit hook of the step: it runs only once the COMMIT succeeded, so a hook a
        # tool registered after it that raises is not mistaken for a failed commit (__exit__).
        self.committed = False
        transaction.on_commit(self._mark_committed)
        recorder.hold()
        self.held.step = self
        return self

    def _mark_committed(self) -> None:
        self.committed = True

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.outer:
            return False
        recorder = self.held.recorder
        self.held.step = None  # the step's held writes: sent now or forgotten
        if exc_type is not None and (issubclass(exc_type, FenceLost) or not transaction_usable()) \
                or connection.needs_rollback:
            self._drop()
            recorder.drop_held(self.seq)
            self.atomic.__exit__(exc_type, exc, tb)  # rolls back
            return False
        try:
            self._write()
        except BaseException as error:
            self._drop()
            recorder.drop_held(self.seq)
            self.atomic.__exit__(type(error), error, error.__traceback__)
            raise
        try:
            self.atomic.__exit__(None, None, None)  # commits
        except BaseException:
            if self.committed:  # committed; a commit hook registered later (a tool's) raised
                recorder.tell()
                raise
            self._drop()
            recorder.drop_held(self.seq)
            raise
        recorder.tell()
        return False  # an exception other than the above is re-raised after the commit

    def _drop(self) -> None:
        """The step rolls back: its held writes are forgotten and the run keeps the lease its row
        still has."""
        if self.values:
            self.held.run.lease_expires_at = self.fence

    def _write(self) -> None:
        """The step's held writes in one statement (core.sql.batches.Together): its messages, the
        run's row (fenced: RunClaimLost when this process no longer holds it) and its events."""
        held, run = self.held, self.held.run
        together = Together()
        if self.messages:
            together.insert(Message, self.messages)
        saved = None
        if self.values:
            saved = together.update(Run, run.pk, self.values,
                                    where={"status": Run.Status.RUNNING, "lease_expires_at": self.fence})
        events = held.recorder.held_into(together)
        admitted = together.statement(*quota.admission_statement(tenant_id=run.tenant_id)) if self.admit else None
        results = together.send()
        if saved is not None and len(results[saved]) != 1:
            raise RunClaimLost(f"run {run.pk} is no longer held by this process", run_id=run.pk)
        held.recorder.held_stored(results[events] if events is not None else [])
        if admitted is not None:
            held.admitted(lambda: quota.admission_check(results[admitted][0]))
