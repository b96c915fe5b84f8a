"""Content negotiation of the API (REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"]). Its own
module: DRF imports it while its views module is still loading."""
from __future__ import annotations

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class ContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that a `?format=` naming no renderer of the view is 406
    NOT_ACCEPTABLE naming the formats it has (the status every operation documents for an unmet
    Accept), where DRF answers 404 as if the resource did not exist."""

    def select_renderer(self, request, renderers, format_suffix=None):
        override = self.settings.URL_FORMAT_OVERRIDE
        wanted = format_suffix or (request.query_params.get(override) if override else None)
        if wanted and not [renderer for renderer in renderers if renderer.format == wanted]:
            formats = ", ".join(sorted({renderer.format for renderer in renderers}))
            raise NotAcceptable(f"format {wanted[:40]!r} is not available here; available: {formats}")
        return super().select_renderer(request, renderers, format_suffix)
