from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    """Audit of every control-plane change and dual control on who may approve (docs/roles.md).
    Sits on top of every app it watches."""

    name = "agentplatform.controlplane"
    label = "controlplane"
    verbose_name = "Control plane / 控制面"

    def ready(self) -> None:
        from agentplatform.controlplane import credentials, guards, receivers
        from agentplatform.controlplane.standing import ProvenanceAssessor
        from approvals.independence import register_assessor

        receivers.connect()
        guards.connect()
        credentials.connect()
        # approvals sits below the control plane: it asks the provenance of standing through this.
        register_assessor(ProvenanceAssessor())
