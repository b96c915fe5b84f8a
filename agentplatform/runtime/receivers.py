"""Signal receivers of the runtime: approvals settle a request, the runtime resumes its run; a
user moved to another tenant leaves no work running in the old one."""
from __future__ import annotations

from agentplatform.runtime import resume, services


def enqueue_resume_on_commit(sender, *, request_id, run_id, status, **kwargs) -> None:
    """On `confirmation_settled`, have the run resumed after the decision commits
    (resume.resume_after_commit: idempotent, and a failure to enqueue never fails the decision)."""
    if run_id is None:
        return
    resume.resume_after_commit(run_id=run_id)


def end_old_tenant_work(sender, *, user, old_tenant_id, actor_id=None, **kwargs) -> None:
    """On `user_tenant_changed` (inside the move's transaction): cancel the moved user's running
    runs and open confirmation requests of the old tenant, audited (docs/roles.md)."""
    services.runs_cancel_for_moved_user(user_id=user.pk, tenant_id=old_tenant_id, actor_id=actor_id)
