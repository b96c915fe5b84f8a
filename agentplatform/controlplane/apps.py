from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    """Audit of every control-plane change (docs/roles.md). Sits on top of every app it watches."""

    name = "agentplatform.controlplane"
    label = "controlplane"
    verbose_name = "Control-plane audit"

    def ready(self) -> None:
        from agentplatform.controlplane import receivers

        receivers.connect()
