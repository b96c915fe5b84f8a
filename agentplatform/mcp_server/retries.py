"""What makes a second MCP call of the same tool with the same arguments "the same call": the key's
conversation, the arguments' hash, the latest McpCall it matches, and the lock that serialises
every caller of one (key, tool, arguments) so a retry racing another executes nothing twice.

`serialise` and `latest` must run inside the caller's transaction (calls.py opens it): the locks
they take are held until it ends.
"""
from __future__ import annotations

import datetime
import hashlib
import struct
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from core import clock
from core.redaction.text import mask_text
from agentplatform.api.models import ApiKey
from agentplatform.mcp_server.models import McpCall
from agentplatform.runtime.models import Conversation
from tools.hashing import arguments_hash


class PrincipalGone(Exception):
    """The key can no longer call: revoked or expired, or its user deactivated or moved to another
    tenant since the key was checked. `code` is the stable code the transport answers with (nothing was run or stored)."""

    code = "AUTHENTICATION_FAILED"


def fresh_user(principal: Any) -> Any:
    """The key's user read again now, with its tenant, from the key's row (one query): Django
    caches permissions and `is_active` on a user object, and the transport may hold one for the
    life of a session. Returns the user. Raises PrincipalGone when the key was revoked or expired
    meanwhile, or its user is inactive, lost its tenant, or now belongs to another tenant than the
    one the principal was authenticated in."""
    key = (ApiKey.objects.select_related("user__tenant")
           .filter(pk=principal.api_key.pk, user_id=principal.user.pk).first())
    user = key.user if key is not None else None
    if (key is None or (key.expiry is not None and key.expiry <= clock.now()) or not user.is_active
            or user.tenant_id is None or user.tenant_id != principal.user.tenant_id):
        raise PrincipalGone("this key can no longer call tools / 该密钥已无法调用工具")
    return user


def conversation_ensure(*, principal: Any, user: Any) -> uuid.UUID:
    """Make sure the key's conversation row exists: "MCP · <key name>" of the key's user in its
    tenant, id `principal.conversation_id` (one per key, so audit rows, confirmation requests and
    the auditor's transcript find it). Created on the first call; nested in the caller's
    transaction (a savepoint absorbs a racing creation). Returns its id."""
    conversation_id = principal.conversation_id
    if Conversation.objects.filter(pk=conversation_id).exists():
        return conversation_id
    title = mask_text(f"MCP · {principal.api_key.name}")[:200]
    try:
        with transaction.atomic():
            Conversation.objects.create(id=conversation_id, tenant_id=user.tenant_id, user=user, title=title)
    except IntegrityError:  # another call of the same key created it a moment ago
        pass
    return conversation_id


def hash_of(value: Any) -> str:
    """The hex SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of `value`: for the
    validated, normalised arguments this is the pipeline's own arguments hash (tools.hashing), so
    a retry matches the request its first call created."""
    return arguments_hash(value)


def _lock_id(principal: Any, tool_name: str, hashed: str) -> int:
    """A signed 64-bit advisory lock id for (key, tool, arguments hash)."""
    digest = hashlib.sha256(f"mcp:{principal.api_key.public_id}:{tool_name}:{hashed}".encode()).digest()
    return struct.unpack(">q", digest[:8])[0]


def serialise(principal: Any, tool_name: str, hashed: str) -> None:
    """Wait until no other caller holds (key, tool, arguments hash), then hold it until the caller's
    transaction ends: PostgreSQL's `pg_advisory_xact_lock` (released by the commit or rollback).
    On SQLite the transaction itself serialises writers, which suffices. Raises RuntimeError
    outside a transaction (a lock released at once would serialise nothing)."""
    if not connection.in_atomic_block:
        raise RuntimeError("serialise must run inside the transaction of the call")
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_id(principal, tool_name, hashed)])


def latest(principal: Any, tool_name: str, hashed: str) -> McpCall | None:
    """The latest McpCall of this key, tool and arguments hash created within
    MCP_RETRY_WINDOW_SECONDS, locked (`select_for_update`) until the caller's transaction ends;
    None when there is none (the call is new)."""
    since = clock.now() - datetime.timedelta(seconds=settings.MCP_RETRY_WINDOW_SECONDS)
    return (McpCall.objects.select_for_update(of=("self",))
            .filter(api_key_id=principal.api_key.pk, tenant_id=principal.tenant_id, tool_name=tool_name,
                    arguments_hash=hashed, created_at__gt=since)
            .order_by("-created_at").first())


def owned(principal: Any, call_id: Any) -> McpCall | None:
    """The McpCall `call_id` if this key made it in this tenant, locked until the caller's
    transaction ends; None for anyone else's, an unknown id, or an id that is not a UUID."""
    try:
        pk = call_id if isinstance(call_id, uuid.UUID) else uuid.UUID(str(call_id))
    except (TypeError, ValueError, AttributeError):
        return None
    return (McpCall.objects.select_for_update(of=("self",))
            .filter(pk=pk, api_key_id=principal.api_key.pk, tenant_id=principal.tenant_id,
                    user_id=principal.user.pk).first())


def peek(principal: Any, call_id: Any) -> McpCall | None:
    """As `owned`, without a lock (to learn the tool and hash to serialise on first)."""
    try:
        pk = call_id if isinstance(call_id, uuid.UUID) else uuid.UUID(str(call_id))
    except (TypeError, ValueError, AttributeError):
        return None
    return McpCall.objects.filter(pk=pk, api_key_id=principal.api_key.pk, tenant_id=principal.tenant_id,
                                  user_id=principal.user.pk).first()


def new_tool_call_id() -> str:
    """The call id the pipeline and the audit rows know an MCP call by: "mcp_<32 hex>"."""
    return f"mcp_{uuid.uuid4().hex}"
