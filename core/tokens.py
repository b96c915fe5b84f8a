"""Single-use secrets handed to a person once: minted from the operating system's random source,
stored only as their SHA-256 digest (as Django's `contrib/auth/tokens.py` and Zulip do).

Standard library only: this is a base module every layer may import.
"""
from __future__ import annotations

import hashlib
import secrets

TOKEN_BYTES = 32  # 256 random bits, beyond guessing (OWASP ASVS V2.5: at least 112 bits of entropy)


def digest(token: str) -> str:
    """The hex SHA-256 (64 characters) of a raw token: the only form of it that is ever stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def mint(*, prefix: str, nbytes: int = TOKEN_BYTES) -> tuple[str, str]:
    """A fresh raw token and its digest: (prefix + URL-safe base64 of `nbytes` random bytes,
    `digest(raw)`). The raw token is returned to its holder once and never stored. Raises nothing."""
    raw = prefix + secrets.token_urlsafe(nbytes)
    return raw, digest(raw)
