from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "agentplatform.runtime"
    label = "runtime"
    verbose_name = "Agent runtime"

    def ready(self) -> None:
        from approvals.signals import confirmation_settled
        from agentplatform.runtime import receivers

        confirmation_settled.connect(receivers.enqueue_resume_on_commit, dispatch_uid="runtime.resume_on_settle")

        from agentplatform.tenancy.signals import user_tenant_changed

        user_tenant_changed.connect(receivers.end_old_tenant_work, dispatch_uid="runtime.end_old_tenant_work")
