from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "agentplatform.runtime"
    label = "runtime"
    verbose_name = "Agent runtime"

    def ready(self) -> None:
        # The Celery app becomes the current app before any task is sent (the project package itself
        # loads nothing on import).
        from agentplatform import celery  # noqa: F401

        # Imported here, not at the top: the modules below import models, which Django loads
        # only after every app's configuration is read.
        from approvals.signals import confirmation_settled
        from agentplatform.runtime import receivers, tracing
        from agentplatform.runtime.prompt import PROMPT_VERSION
        from agentplatform.tenancy.signals import user_tenant_changed
        from audit import metrics

        metrics.prompt_version_set(PROMPT_VERSION)
        tracing.register()  # approval spans find the trace of the run they belong to
        confirmation_settled.connect(receivers.enqueue_resume_on_commit, dispatch_uid="runtime.resume_on_settle")
        user_tenant_changed.connect(receivers.end_old_tenant_work, dispatch_uid="runtime.end_old_tenant_work")
