"""Signal receivers of the runtime: approvals settle a request, the runtime resumes its run."""
from __future__ import annotations

from django.db import transaction


def enqueue_resume_on_commit(sender, *, request_id, run_id, status, **kwargs) -> None:
    """On `confirmation_settled`, enqueue `resume_run(run_id)` after the decision commits.

    A rolled-back decision enqueues nothing. The task is idempotent: a run that still waits for
    other decisions, or that another worker already claimed, is left alone.
    """
    if run_id is None:
        return
    from agentplatform.runtime.tasks import resume_run

    transaction.on_commit(lambda: resume_run.delay(str(run_id)))
