"""ASGI entry point: the MCP server at /mcp/ (agentplatform.mcp_server.asgi_app) in front of
Django's ASGI application, which serves everything else."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
django_application = get_asgi_application()

from agentplatform.mcp_server.asgi_app import router  # noqa: E402  (needs the apps loaded)

application = router(django_application)

# Expiry and recovery settle within seconds even without beat (docs/decisions.md, item 9).
from agentplatform.runtime.settle import start_web_sweeper  # noqa: E402

start_web_sweeper()
