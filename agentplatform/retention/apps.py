from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "agentplatform.retention"
    label = "retention"
    verbose_name = "Retention"
