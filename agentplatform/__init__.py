"""The project package: settings, URLs, ASGI/WSGI entry points and the apps of the top floor.

Importing it loads nothing: the Celery app lives in `agentplatform.celery` and is loaded by the
runtime app when Django starts (and found by `celery -A agentplatform`)."""
