"""Who calls /mcp/: the platform API key in `Authorization: Bearer <key>`, resolved before any MCP
message is read (agentplatform.mcp_server.asgi_app).

The key is checked by the REST API's own authentication (knox digests, constant-time compare,
expired keys deleted on sight, inactive users refused, `last_used_at` stamped at most once a
minute), in a worker thread. The key itself is never logged, stored or put into an error.
"""
from __future__ import annotations

from collections.abc import Iterable

from agentplatform.api.auth import ApiKeyAuthentication
from agentplatform.mcp_server.calls import Principal
from agentplatform.mcp_server.threads import in_thread

# The longest Authorization header worth checking: knox keys are 64 hex characters.
_MAX_KEY_CHARS = 512


class AuthFailure(Exception):
    """A request to /mcp/ without a usable key. code: NOT_AUTHENTICATED (no header, another
    scheme, an empty key), AUTHENTICATION_FAILED (unknown, revoked or expired key, inactive user)
    or NO_TENANT (the key's user belongs to no tenant). detail: an English sentence naming no key."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def bearer_key(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The key of an ASGI request's `Authorization: Bearer <key>` header. Raises AuthFailure
    NOT_AUTHENTICATED when the header is missing, of another scheme, empty or not ASCII."""
    raw = next((value for name, value in headers if name.lower() == b"authorization"), None)
    if raw is None:
        raise AuthFailure("NOT_AUTHENTICATED", "send the platform API key as `Authorization: Bearer <key>`")
    try:
        words = raw.decode("ascii").split()
    except UnicodeDecodeError:
        words = []
    if len(words) != 2 or words[0].lower() != "bearer" or len(words[1]) > _MAX_KEY_CHARS:
        # The header's words are not repeated: a client that sends a bare key would see it echoed.
        raise AuthFailure("NOT_AUTHENTICATED", "the Authorization header must be `Bearer <platform API key>`")
    return words[1]


def principal_for_key(key: str, *, client: str = "") -> Principal:
    """The Principal of a valid API key (runs queries: call it in a thread). client: the MCP
    clientInfo "name/version" once known. Raises AuthFailure AUTHENTICATION_FAILED (unknown,
    revoked or expired key, inactive user) or NO_TENANT."""
    from rest_framework.exceptions import AuthenticationFailed

    try:
        user, api_key = ApiKeyAuthentication().authenticate_credentials(key.encode("ascii"))
    except AuthenticationFailed:
        raise AuthFailure("AUTHENTICATION_FAILED",
                          "the API key is unknown, revoked or expired, or its user is inactive") from None
    if user.tenant_id is None:
        raise AuthFailure("NO_TENANT", "the API key's user belongs to no tenant: there are no tools to serve")
    return Principal(user=user, api_key=api_key, client=client)


async def authenticate(headers: Iterable[tuple[bytes, bytes]]) -> Principal:
    """The Principal of an ASGI request's bearer key, resolved in a worker thread. Raises
    AuthFailure (NOT_AUTHENTICATED, AUTHENTICATION_FAILED, NO_TENANT)."""
    key = bearer_key(headers)
    return await in_thread(principal_for_key, key)
