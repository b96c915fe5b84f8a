from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "tools.catalog"
    label = "catalog"
    verbose_name = "Built-in catalog (demo business data)"

    def ready(self) -> None:
        # Imported here: the tools module loads this app's models, which exist only now.
        from tools.catalog import tools  # noqa: F401  - registers the built-in tools
