"""How gated calls reached the platform, read from the audit trail: the channel of a confirmation
request is the `channel` of its first audit row (the CONFIRMATION_REQUIRED row the gate wrote,
with the ToolContext's channel on it). Apps above read it here instead of importing the surface
the call came through (an MCP call's record lives in agentplatform.mcp_server, above them)."""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from audit.models import AuditEvent


def channels_of_requests(*, tenant_id: int | None, request_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """{request id: channel} for the requests of `request_ids` in `tenant_id` whose first audit row
    (oldest by occurred_at, then id) names a channel, e.g. {"name": "mcp", "api_key": <key name>,
    "api_key_id", "client"}. Requests made in the platform's own chat, unknown ids and another
    tenant's requests are absent. One query; no tenant (None) or no ids: {} without a query."""
    ids = list(request_ids)
    if tenant_id is None or not ids:
        return {}
    rows = (AuditEvent.objects.filter(tenant_id=tenant_id, confirmation_id__in=ids)
            .order_by("occurred_at", "id").values_list("confirmation_id", "channel"))
    first: dict[uuid.UUID, Any] = {}
    for request_id, channel in rows:
        first.setdefault(request_id, channel)
    return {request_id: channel for request_id, channel in first.items() if isinstance(channel, dict) and channel}


def channel_of_request(*, tenant_id: int | None, request_id: uuid.UUID) -> dict[str, Any] | None:
    """The channel of one request (as `channels_of_requests`), or None when it came through the
    platform's own chat, is unknown or is another tenant's."""
    return channels_of_requests(tenant_id=tenant_id, request_ids=[request_id]).get(request_id)
