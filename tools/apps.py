from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools"

    def ready(self) -> None:
        # Imported here: these modules load models, which exist only once every app is loaded.
        from django.db.models.signals import post_migrate

        from approvals.amendments import register_rebinder
        from approvals.selectors import register_edit_rules, register_live_facts
        from tools import approval_context, approval_edit, services

        # The registry is code; its database mirror is refreshed after every migrate.
        post_migrate.connect(services.post_migrate_sync, sender=self)
        # approvals sits below tools: it reads live approval facts through this provider.
        register_live_facts(approval_context.live_facts)
        # ... and checks an approver's edited arguments with the tool through this one.
        register_rebinder(approval_edit.rebind)
        # ... and tells people what an approver may edit (the tool's `editable`).
        register_edit_rules(approval_edit.edit_rules)
