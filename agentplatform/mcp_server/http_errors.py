"""Stable codes on the MCP transport's own HTTP error answers.

The SDK's streamable-HTTP transport answers some requests itself, before any handler runs (an
unknown or expired session, a missing Accept type, a message that is not JSON-RPC, a Host or
Origin refused by the DNS-rebinding protection, too many sessions). This wraps its `send` so every
such answer (status >= 400) is a JSON-RPC error body whose `error.data.code` is a stable name, as
the handlers' own errors are (agentplatform.mcp_server.server.error_codes).
"""
from __future__ import annotations

import json
from typing import Any

# HTTP status of a transport-level refusal → its stable code.
HTTP_CODES = {403: "INVALID_ORIGIN", 404: "SESSION_NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 406: "NOT_ACCEPTABLE",
              413: "PAYLOAD_TOO_LARGE", 415: "UNSUPPORTED_MEDIA_TYPE", 421: "INVALID_HOST", 503: "TOO_MANY_SESSIONS"}
# JSON-RPC error codes → the stable `error.data.code` every error carries.
ERROR_CODES = {-32700: "PARSE_ERROR", -32600: "INVALID_REQUEST", -32601: "METHOD_NOT_FOUND",
               -32602: "INVALID_PARAMS", -32603: "INTERNAL_ERROR"}


def coded(status: int, body: bytes) -> bytes:
    """The error body `body` of an answer with HTTP `status`, as a JSON-RPC error with data.code
    (a JSON-RPC error's own data kept under "detail"; a plain-text body becomes the message)."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if not (isinstance(payload, dict) and isinstance(payload.get("error"), dict)):
        text = body.decode("utf-8", errors="replace")[:300]
        payload = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}
    error = payload["error"]
    data = error.get("data")
    if not (isinstance(data, dict) and "code" in data):
        code = HTTP_CODES.get(status) or ERROR_CODES.get(error.get("code"), "INVALID_REQUEST")
        error["data"] = {"code": code, **({"detail": data} if data not in (None, "") else {})}
    return json.dumps(payload).encode()


def with_codes(send: Any) -> Any:
    """An ASGI `send` that rewrites error answers (status >= 400, one body) with `coded`; every
    other answer (JSON results, SSE streams) passes through untouched."""
    held: dict[str, Any] = {}

    async def wrapped(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            held["start"], held["body"] = message, b""
            return
        if message["type"] != "http.response.body" or "start" not in held:
            await send(message)
            return
        held["body"] += message.get("body", b"")
        if message.get("more_body", False):
            return
        start = held.pop("start")
        body = coded(start["status"], held.pop("body"))
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
        await send({**start, "headers": [*headers, (b"content-type", b"application/json"),
                                         (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return wrapped
