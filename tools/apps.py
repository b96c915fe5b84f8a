from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from tools import services

        # The registry is code; its database mirror is refreshed after every migrate.
        post_migrate.connect(services.post_migrate_sync, sender=self)
