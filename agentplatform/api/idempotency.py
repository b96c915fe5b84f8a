"""HTTP Idempotency-Key for POST requests (IETF httpapi draft "The Idempotency-Key HTTP Header
Field"): the first request with a key runs; a retry with the same key and body gets the stored
response; the same key with another body is refused (422); a retry while the first is still
running is refused (409, retryable). Keys are scoped by tenant and user and live 24 hours.

Claims are single-use, so never read-then-write: an INSERT that loses a race cleanly on the unique constraint, and
conditional UPDATE/DELETE statements whose row counts are checked.
"""
from __future__ import annotations

import datetime
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from core import clock
from agentplatform.api.models import HttpIdempotencyKey
from core.errors import ConflictError, DomainError, InvalidInputError
from tools.hashing import canonical_json

Status = HttpIdempotencyKey.Status
MAX_KEY_LENGTH = 255


class IdempotencyKeyReused(DomainError):
    """The key was already used with another request body (draft section 2.7: 422)."""

    code = "IDEMPOTENCY_KEY_REUSED"
    http_status = 422


class IdempotencyKeyInProgress(ConflictError):
    """A request with this key is still being processed (draft section 2.7: 409). Retry later."""

    code = "IN_PROGRESS"
    retryable = True


@dataclass(frozen=True)
class Claim:
    """The result of claiming a key: `replay` False = this request owns `record` and must run."""

    record: HttpIdempotencyKey
    replay: bool


IDEMPOTENCY_KEY_PATTERN = "^[ -~]*[!-~][ -~]*$"  # printable ASCII, not only spaces (ECMA 262 and Python alike)
_KEY = re.compile(r"[ -~]*[!-~][ -~]*")


def parse_idempotency_key(raw: str | None) -> str | None:
    """Read an Idempotency-Key header value. Returns the key, or None when the header is absent.

    The rule (also the OpenAPI schema's, IDEMPOTENCY_KEY_PATTERN): after the surrounding spaces an
    HTTP server strips anyway, 1 to 255 printable ASCII characters, not all spaces. The draft
    defines the value as a Structured Field String (`"8e03978e-..."`); a quoted value with
    something between the quotes is unquoted, so both spellings name the same key (many clients
    send keys unquoted). Raises InvalidInputError otherwise.
    """
    if raw is None:
        return None
    value = raw.strip(" \t")
    if len(value) > MAX_KEY_LENGTH or not _KEY.fullmatch(value):
        raise InvalidInputError(f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, "
                           "not only spaces")
    if len(value) > 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value


def request_fingerprint(*, method: str, path: str, body: Any) -> str:
    """The hex SHA-256 of the canonical JSON of {method, path, body} (body: the parsed JSON).

    Key order and whitespace in the client's JSON do not change it; any other change does.
    """
    payload = {"method": method.upper(), "path": path, "body": body}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def _insert(*, user, key: str, fingerprint: str, now: datetime.datetime) -> HttpIdempotencyKey | None:
    try:
        with transaction.atomic():
            return HttpIdempotencyKey.objects.create(
                tenant_id=user.tenant_id, user=user, key=key, fingerprint=fingerprint, status=Status.PROCESSING,
                locked_until=now + datetime.timedelta(seconds=settings.API_IDEMPOTENCY_LEASE_SECONDS),
                created_at=now, expires_at=now + datetime.timedelta(hours=settings.API_IDEMPOTENCY_TTL_HOURS),
            )
    except IntegrityError:
        return None


def http_idempotency_claim(*, user, key: str, fingerprint: str) -> Claim:
    """Claim `key` for this request of `user` (who must belong to a tenant).

    Returns Claim(record, replay=False) when this request must run (a new key, an expired one, or
    a PROCESSING claim whose lease ran out), or Claim(record, replay=True) when a completed
    response with the same fingerprint exists. Raises IdempotencyKeyReused (422) for another
    fingerprint and IdempotencyKeyInProgress (409) while the first request still runs.
    """
    now = clock.now()
    for _ in range(3):
        record = _insert(user=user, key=key, fingerprint=fingerprint, now=now)
        if record is not None:
            return Claim(record, replay=False)
        existing = HttpIdempotencyKey.objects.filter(tenant_id=user.tenant_id, user=user, key=key).first()
        if existing is None:
            continue  # pruned between our INSERT and SELECT: try the INSERT again
        if existing.expires_at <= now:
            # An expired key is free again; whoever deletes it first re-inserts.
            HttpIdempotencyKey.objects.filter(pk=existing.pk, expires_at__lte=now).delete()
            continue
        if existing.fingerprint != fingerprint:
            raise IdempotencyKeyReused("this Idempotency-Key was already used with a different request body")
        if existing.status == Status.COMPLETED:
            return Claim(existing, replay=True)
        if existing.locked_until <= now:
            # The request that claimed it died without answering: take it over (compare-and-set).
            lease = now + datetime.timedelta(seconds=settings.API_IDEMPOTENCY_LEASE_SECONDS)
            taken = HttpIdempotencyKey.objects.filter(
                pk=existing.pk, status=Status.PROCESSING, locked_until=existing.locked_until,
            ).update(locked_until=lease)
            if taken == 1:
                existing.locked_until = lease
                return Claim(existing, replay=False)
        break
    raise IdempotencyKeyInProgress("a request with this Idempotency-Key is still being processed; retry later")


def http_idempotency_complete(*, record: HttpIdempotencyKey, status_code: int, body: Any) -> bool:
    """Store the response of the request that owns `record` (PROCESSING -> COMPLETED).

    `body` must be JSON-serialisable and must not contain a confirmation token. Returns False
    when the claim was lost meanwhile (taken over after its lease): the other owner's answer wins.
    """
    stored = HttpIdempotencyKey.objects.filter(
        pk=record.pk, status=Status.PROCESSING, locked_until=record.locked_until,
    ).update(status=Status.COMPLETED, response_status=status_code, response_body=body)
    return stored == 1


def http_idempotency_release(*, record: HttpIdempotencyKey) -> None:
    """Forget an unanswered claim (server error or retryable failure), so a retry runs again."""
    HttpIdempotencyKey.objects.filter(
        pk=record.pk, status=Status.PROCESSING, locked_until=record.locked_until,
    ).delete()


def http_idempotency_prune(*, limit: int = 10_000) -> int:
    """Delete up to `limit` expired records. Returns how many were deleted."""
    ids = list(HttpIdempotencyKey.objects.filter(expires_at__lte=clock.now()).values_list("pk", flat=True)[:limit])
    if not ids:
        return 0
    deleted, _ = HttpIdempotencyKey.objects.filter(pk__in=ids, expires_at__lte=clock.now()).delete()
    return deleted
