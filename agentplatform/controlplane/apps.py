from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    """Audit of every control-plane change and dual control on who may approve (docs/roles.md).
    Sits on top of every app it watches."""

    name = "agentplatform.controlplane"
    label = "controlplane"
    verbose_name = "Control plane / 控制面"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models, which load only once the app
        # registry is ready.
        from agentplatform.controlplane import credentials
        from agentplatform.controlplane.guards import accounts, grants, policies
        from agentplatform.controlplane.receivers import rows, service_accounts
        from agentplatform.controlplane.standing import ProvenanceAssessor
        from approvals.independence import register_assessor

        service_accounts.connect()  # first on each signal: its refusal comes before any other receiver runs
        rows.connect()
        grants.connect()
        accounts.connect()
        policies.connect()
        credentials.connect()
        # approvals sits below the control plane: it asks the provenance of standing through this.
        register_assessor(ProvenanceAssessor())
