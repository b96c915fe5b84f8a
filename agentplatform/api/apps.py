from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API under /api/v1/ and its HTTP Idempotency-Key records (label `api`)."""

    name = "agentplatform.api"
    label = "api"
    verbose_name = "REST API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: an AppConfig module loads before any app's models.
        # The Celery app autodiscovers a fixed list of apps; importing registers our shared tasks.
        from agentplatform.api import tasks  # noqa: F401
        from agentplatform.ops import tracing
        from agentplatform.ops.metrics import connect_celery_signals
        from agentplatform.tenancy.credentials import api_keys_revoke_for_moved_user
        from agentplatform.tenancy.signals import user_tenant_changed

        user_tenant_changed.connect(api_keys_revoke_for_moved_user, dispatch_uid="api.revoke_keys_on_move")
        # Celery task counts and durations for /metrics, in web processes and workers alike (every
        # process sets Django up; the Celery app module itself imports nothing of ours).
        connect_celery_signals()
        # OpenTelemetry, when OTEL_TRACES_EXPORTER names an exporter (off by default): once per process;
        # Celery's pool processes configure it themselves (agentplatform.ops.tracing).
        tracing.configure_process()
