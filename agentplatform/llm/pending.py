"""What the model is told, and what the user is shown, while a call of the conversation waits for a
human.

A run answers while another call of its conversation (an earlier run's gated call) still waits
for a confirmation or approval. The model would otherwise know nothing about it and may write
"done". So:

- `system_note` goes into the system message of every request while such calls exist: which
  actions wait, for whom, and that they have not happened (a system note, not a tool message: no
  call id of this run is answered by it);
- `qualify_answer` is applied to the final answer before it is stored or shown: a platform notice
  naming each waiting action is appended, so an answer that claims one happened is never the last
  word. The rule is mechanical on purpose (no guess about what the text claims): whenever
  something waits, the answer carries the truth beside it. The streamed MODEL_TEXT events show
  the model's words as they come; FINAL_TEXT, the run's final answer and the stored message carry
  the notice.

"Waiting" means a ConfirmationRequest of the conversation that is PENDING (undecided) or CONFIRMED
(decided, not yet executed), and not past its expiry.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from core import clock
from core.sql.select import select_rows
from approvals.models import ConfirmationRequest

NOTICE_HEADER = "Not done yet"


@dataclass(frozen=True)
class WaitingCall:
    """One gated call of the conversation that has not run. `summary` is the masked summary shown
    to approvers; `needs` is "requester" or "approvers"."""

    confirmation_id: str
    tool: str
    summary: str
    needs: str
    status: str


def waiting_calls(*, conversation_id: uuid.UUID | str) -> list[WaitingCall]:
    """The conversation's gated calls still waiting (PENDING or CONFIRMED, unexpired), oldest
    first. One indexed query."""
    # A prebuilt statement (core.sql.select.select_rows): read before every model call, so
    # it skips the ORM's per-call query compilation (docs/performance.md).
    rows = select_rows(ConfirmationRequest, {
        "conversation_id": conversation_id, "expires_at__gt": clock.now(),
        "status__in": (ConfirmationRequest.Status.PENDING, ConfirmationRequest.Status.CONFIRMED)},
        order_by=("created_at",))
    return [WaitingCall(confirmation_id=str(r.pk), tool=r.tool_name, summary=r.summary,
                        needs="requester" if r.policy == ConfirmationRequest.Policy.REQUESTER else "approvers",
                        status=r.status)
            for r in rows]


def _describe(call: WaitingCall) -> str:
    if call.status == ConfirmationRequest.Status.CONFIRMED:
        state = "confirmed, about to run"
    elif call.needs == "requester":
        state = "waiting for the user's confirmation"
    else:
        state = "waiting for approvers"
    return f"{call.tool}: {call.summary} ({state}; confirmation {call.confirmation_id})"


def system_note(calls: list[WaitingCall]) -> str:
    """Text to append to the system message ("" when nothing waits)."""
    if not calls:
        return ""
    lines = "\n".join(f"- {_describe(c)}" for c in calls)
    return ("\n\nNote from the platform: these actions of this conversation have NOT been carried out; each "
            "waits for a human decision. Do not say they are done, do not propose them again, and tell the "
            "user they are pending if relevant:\n" + lines)


def qualify_answer(answer: str, calls: list[WaitingCall]) -> str:
    """`answer` with the platform's notice of the waiting calls appended (unchanged when none)."""
    if not calls:
        return answer
    lines = "\n".join(f"- {_describe(c)}" for c in calls)
    notice = (f"[{NOTICE_HEADER}] When this answer was written, these actions had not been carried out and "
              f"were waiting for a decision:\n{lines}")
    return f"{answer}\n\n{notice}" if answer else notice
