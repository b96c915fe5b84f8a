"""Following changes of the offered tools per MCP session: `notifications/tools/list_changed`.

Each stateful session keeps the fingerprint of the list it was last given (tools/list). From its
first request on, a watcher re-lists the tools offered to the key's user every
MCP_LIST_CHANGED_POLL_SECONDS and, when the fingerprint changed (a tool disabled in the admin, a
grant revoked, a tenant's whitelist changed), sends `notifications/tools/list_changed` on the
session's standalone stream (the client's GET stream; dropped when it has none open). The watcher
ends with the session, or when the key can no longer call (revoked or expired, its user deactivated
or moved to another tenant). Sessions without a standalone stream (stateless, the 2026-07-28
per-request protocol) have no watcher: their clients list again.
"""
from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone
from mcp.server.context import ServerRequestContext

from agentplatform.mcp_server.calls import Principal
from agentplatform.mcp_server.listing import fingerprint, offered_listing
from agentplatform.mcp_server.threads import in_thread

logger = logging.getLogger("agentplatform.mcp_server")

_FINGERPRINT = "agentplatform.tools_fingerprint"
_WATCHER = "agentplatform.tools_watcher"


class _Runtime:
    """The task group the watchers run in (opened by asgi_app with the session manager)."""

    task_group: anyio.abc.TaskGroup | None = None


runtime = _Runtime()


def _connection(ctx: ServerRequestContext[Any, Any]) -> Any:
    # The SDK hands handlers a per-request ServerSession; its connection (per-session state and
    # teardown) is not public in mcp 2.3.0.
    return getattr(ctx.session, "_connection", None)


def listed(ctx: ServerRequestContext[Any, Any], principal: Principal, tools: list[Any]) -> None:
    """Record what this session's client was just given by tools/list, and watch from now on."""
    connection = _connection(ctx)
    if connection is None:
        return
    connection.state[_FINGERPRINT] = fingerprint(tools)
    _watch_session(ctx, connection, principal)


def touched(ctx: ServerRequestContext[Any, Any], principal: Principal) -> None:
    """A request other than tools/list arrived on this session: make sure it is watched."""
    connection = _connection(ctx)
    if connection is not None:
        _watch_session(ctx, connection, principal)


def _watch_session(ctx: ServerRequestContext[Any, Any], connection: Any, principal: Principal) -> None:
    task_group = runtime.task_group
    if task_group is None or connection.session_id is None or connection.state.get(_WATCHER) is not None:
        return
    scope = anyio.CancelScope()
    connection.state[_WATCHER] = scope
    connection.exit_stack.callback(scope.cancel)
    task_group.start_soon(_watch, scope, connection, ctx.session, principal.user.pk, principal.api_key.pk,
                          principal.tenant_id)


def current_fingerprint(user_id: int, key_pk: str, tenant_id: int | None) -> str | None:
    """The fingerprint of the tools offered now to the user of a key that can still call, or None
    when it cannot: the key revoked or expired, its user deactivated or no longer in `tenant_id`
    (the tenant the session was opened in), as calls.retries.fresh_user judges a call (runs
    queries: call it in a thread)."""
    from agentplatform.api.models import ApiKey

    valid = ApiKey.objects.filter(Q(expiry__isnull=True) | Q(expiry__gt=timezone.now()), pk=key_pk, user_id=user_id,
                                  user__is_active=True, user__tenant_id=tenant_id).exists()
    user = get_user_model().objects.filter(pk=user_id).first() if valid else None
    return None if user is None else fingerprint(offered_listing(user))


async def _watch(scope: anyio.CancelScope, connection: Any, session: Any, user_id: int, key_pk: str,
                 tenant_id: int | None) -> None:
    with scope:
        while True:
            await anyio.sleep(settings.MCP_LIST_CHANGED_POLL_SECONDS)
            try:
                current = await in_thread(current_fingerprint, user_id, key_pk, tenant_id)
            except Exception:  # noqa: BLE001 - a failed poll (database restart) must not end the session
                logger.warning("MCP list_changed poll failed; trying again later", exc_info=True)
                continue
            if current is None:
                return
            known = connection.state.get(_FINGERPRINT)
            connection.state[_FINGERPRINT] = current
            if known is not None and known != current:
                await session.send_tool_list_changed()
