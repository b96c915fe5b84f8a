from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Confirmations and approvals"

    def ready(self) -> None:
        # Imported here: the modules below import models, loaded only after every app's configuration.
        from django.db.models.signals import post_save

        from approvals.models import Approval
        from approvals.quality_metrics import approval_saved

        post_save.connect(approval_saved, sender=Approval, dispatch_uid="approvals.quality_metrics")
