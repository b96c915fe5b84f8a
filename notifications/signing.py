"""Signatures of webhook bodies (docs/notifications.md, "Verifying a delivery").

Each attempt carries `X-Agentplatform-Timestamp: <unix seconds>` and
`X-Agentplatform-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body bytes>" keyed with
the endpoint's secret>`. Signing the timestamp with the body lets a receiver refuse replays of an
old delivery; comparing in constant time keeps the secret from leaking through timing.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import time

SIGNATURE_HEADER = "X-Agentplatform-Signature"
TIMESTAMP_HEADER = "X-Agentplatform-Timestamp"
EVENT_HEADER = "X-Agentplatform-Event"
DELIVERY_HEADER = "X-Agentplatform-Delivery"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh endpoint secret: "whsec_" + 256 random bits, url-safe."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The signature header value for `body` sent at `timestamp` (unix seconds): "sha256=<hex>"."""
    mac = hmac.new(secret.encode("utf-8"), str(int(timestamp)).encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(*, secret: str, timestamp: str | int, body: bytes, signature: str, tolerance_seconds: int = 300,
           now: float | None = None) -> bool:
    """True when `signature` is the endpoint's signature of `body` at `timestamp` and the timestamp
    is within `tolerance_seconds` of `now` (default: the current time). What a relay runs."""
    try:
        stamp = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - stamp) > tolerance_seconds:
        return False
    return hmac.compare_digest(sign(secret=secret, timestamp=stamp, body=body), str(signature))
