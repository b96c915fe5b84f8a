"""How a run ends: its final answer (COMPLETED) or its failure (FAILED), each one step."""
from __future__ import annotations

from agentplatform.llm import pending as llm_pending
from core.redaction.text import mask_text
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.outcome import RunOutcome
from agentplatform.runtime.step import HeldRun, Step
from approvals import cancellation
from audit import metrics


def finish(held: HeldRun, answer: str, *, stop_reason: str = "stop", waiting: list | None = None) -> RunOutcome:
    """The final answer: its message, the run COMPLETED and the FINAL_TEXT and DONE events, one
    step. waiting: the conversation's calls still waiting for a decision (an answer never claims
    one of them happened unopposed). Returns the run's outcome."""
    run = held.run
    with Step.begin(held) as step:
        if waiting:
            answer = llm_pending.qualify_answer(answer, llm_pending.waiting_calls(conversation_id=run.conversation_id))
        answer = mask_text(answer)  # the answer is stored on the run, shown and returned: masked
        step.emit(RunEvent.Type.FINAL_TEXT, {"text": answer})
        step.add_message(role="assistant", content=answer, in_memory=True)
        run.status, run.final_answer, run.stop_reason = Run.Status.COMPLETED, answer, stop_reason
        step.save_run("status", "final_answer", "stop_reason", "state", "iterations")
        step.emit(RunEvent.Type.DONE, {"status": run.status})
        outcome = RunOutcome(run)
    metrics.run_finished(iterations=run.iterations, tenant_id=run.tenant_id)
    return outcome


def fail(held: HeldRun, code: str, message: str) -> None:
    """End the run FAILED with `code`: its ERROR and DONE events, the run's row and the
    cancellation of its open requests, one step. Raises RunClaimLost when this process no longer
    holds the run (nothing is written then)."""
    run = held.run
    with Step.begin(held) as step:
        step.emit(RunEvent.Type.ERROR, {"code": code, "message": message[:500]})
        run.status, run.error_code, run.error_message = Run.Status.FAILED, code, message[:500]
        step.save_run("status", "error_code", "error_message", "state", "iterations")
        # The run's row is locked before its requests (the order run_cancel and a consumption
        # take them in: no deadlock between them); its held save is written with the step's end.
        step.lock("it was not failed by this process")
        # No request is left open (or CONFIRMED) on a finished run: each ends CANCELLED with the reason.
        cancellation.confirmations_cancel_for_run(run_id=run.pk, actor_id=None, reason=f"the run ended: {code}")
        step.emit(RunEvent.Type.DONE, {"status": run.status})
