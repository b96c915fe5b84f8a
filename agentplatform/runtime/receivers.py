"""Signal receivers of the runtime: approvals settle a request, the runtime resumes its run."""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Iterator

from django.conf import settings
from django.db import transaction

from agentplatform import correlation


logger = logging.getLogger(__name__)

# Set while a request resumes the run it just confirmed itself (services._confirm_and_resume):
# with eager tasks the on-commit resume would run the same run once more in the same request
# (issue 11: it repeated the claim, an UPDATE and a re-read). With a broker the message is still
# sent: a worker and the request race for the run, and the compare-and-set claim lets one win.
_RESUMING_INLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("resuming_inline", default=False)


@contextlib.contextmanager
def resuming_inline() -> Iterator[None]:
    """Within this block the caller resumes the runs its decisions settle itself (eager tasks only)."""
    token = _RESUMING_INLINE.set(True)
    try:
        yield
    finally:
        _RESUMING_INLINE.reset(token)


def enqueue_resume_on_commit(sender, *, request_id, run_id, status, **kwargs) -> None:
    """On `confirmation_settled`, enqueue `resume_run(run_id)` after the decision commits.

    A rolled-back decision enqueues nothing. The task is idempotent: a run that still waits for
    other decisions, or that another worker already claimed, is left alone. The decision is
    committed before this runs, so a failure here (the broker is down; eagerly, an error of the
    resumed run itself) never turns the decision's answer into an error: it is logged, and the
    run stays waiting to resume until the recovery sweep (or the next read, eagerly) takes it.
    """
    if run_id is None:
        return
    if _RESUMING_INLINE.get() and settings.CELERY_TASK_ALWAYS_EAGER:
        return  # the caller resumes it right after the commit (resuming_inline)
    transaction.on_commit(lambda: _enqueue(run_id))


def _enqueue(run_id) -> None:
    from agentplatform.runtime.tasks import resume_run

    # Eagerly the resume runs right here, inside another request (an approver's, or a settle-on-
    # read): that request keeps its own run id for its error bodies and logs.
    own = correlation.current_run_id()
    try:
        resume_run.delay(str(run_id))
    except Exception:  # noqa: BLE001 - see the docstring above: the decision stands
        logger.exception("resume of run %s was not enqueued now; the recovery sweep will resume it", run_id)
    finally:
        correlation.set_run_id(own)


def end_old_tenant_work(sender, *, user, old_tenant_id, actor_id=None, **kwargs) -> None:
    """On `user_tenant_changed` (inside the move's transaction): cancel the moved user's running
    runs and open confirmation requests of the old tenant, audited (docs/roles.md)."""
    from agentplatform.runtime.services import runs_cancel_for_moved_user

    runs_cancel_for_moved_user(user_id=user.pk, tenant_id=old_tenant_id, actor_id=actor_id)
