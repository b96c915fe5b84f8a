"""The Celery application. Tasks live in each app's `tasks.py`; settings use the CELERY_ namespace."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")

app = Celery("agentplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["approvals", "tools", "agentplatform.runtime"])
