"""ASGI entry point."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
application = get_asgi_application()

# Expiry and recovery settle within seconds even without beat (docs/decisions.md, item 9).
from agentplatform.runtime.settle import start_web_sweeper  # noqa: E402

start_web_sweeper()
