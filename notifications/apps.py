from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Email and outbound webhooks about approval requests (docs/notifications.md). Sits above
    approvals: it listens to approvals' signals; approvals never imports it."""

    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Imported here, not at the top: the receivers import models, which load only once the app
        # registry is ready.
        from approvals.signals import approvers_needed, confirmation_settled, request_ended, request_revised
        from notifications import receivers

        approvers_needed.connect(receivers.on_approvers_needed, dispatch_uid="notifications.approvers_needed")
        confirmation_settled.connect(receivers.on_settled, dispatch_uid="notifications.settled")
        request_revised.connect(receivers.on_revised, dispatch_uid="notifications.revised")
        request_ended.connect(receivers.on_ended, dispatch_uid="notifications.ended")
