"""The Celery application.

Settings come from Django settings with the CELERY_ namespace (agentplatform/settings.py, section
"Celery"): with no CELERY_BROKER_URL every task runs eagerly in-process; with
`CELERY_BROKER_URL=redis://...`, `celery -A agentplatform worker` and `celery -A agentplatform beat`
do the work (docs/operations.md). Tasks live in each installed app's `tasks.py` and are found by
autodiscovery.
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")

app = Celery("agentplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
# No argument: every app in INSTALLED_APPS (approvals, tools, agentplatform.runtime, the API, ...).
app.autodiscover_tasks()
# Task counts and durations for /metrics are connected by the API app when Django starts
# (agentplatform.ops.metrics.connect_celery_signals), so this module imports nothing of ours.
