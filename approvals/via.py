"""The "via MCP" mark of a request: how its call reached the platform, read from the first row of
its audit trail (audit.channels), set on the rows a page draws (templates/approvals/_via.html)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit.channels import channels_of_requests


def attach_via(rows: Iterable[Any], *, tenant_id: int | None) -> list[Any]:
    """Set `row.via` on each request of `rows` (ConfirmationRequests of `tenant_id`): its channel
    ({"name": "mcp", "api_key": <key name>, ...}) when the call came through another surface than
    the platform's own chat, else None. One query for all of them. Returns the rows as a list."""
    rows = list(rows)
    channels = channels_of_requests(tenant_id=tenant_id, request_ids=[row.pk for row in rows])
    for row in rows:
        row.via = channels.get(row.pk)
    return rows
