from django.apps import AppConfig
from django.db.backends.signals import connection_created

from audit.chain import register_sqlite_functions


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        connection_created.connect(register_sqlite_functions, dispatch_uid="audit_chain_sqlite")
