"""A tiny ASGI application for the base URL test: answers the PLATFORM_BASE_URL that Django's
settings read in a gunicorn worker started with gunicorn.conf.py."""
from __future__ import annotations

import os


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    from django.conf import settings

    body = settings.PLATFORM_BASE_URL.encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
