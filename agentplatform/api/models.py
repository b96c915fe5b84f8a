"""HTTP Idempotency-Key records of the REST API (IETF httpapi "The Idempotency-Key HTTP Header
Field" draft): one row per (tenant, user, key), claimed by its INSERT."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from knox.models import AbstractAuthToken


class HttpIdempotencyKey(models.Model):
    """One Idempotency-Key a client sent with a POST, and the response it got.

    The claim is the INSERT: the unique constraint on (tenant, user, key) lets exactly one of two
    racing requests in. `fingerprint` is the SHA-256 of the canonical JSON of method, path and body;
    the same key with another fingerprint is refused (422). While `PROCESSING`, a retry answers 409;
    once `COMPLETED`, `response_status` and `response_body` are replayed. The stored body never
    holds a confirmation token (tokens are shown once; only their digest is ever stored). Rows
    expire `API_IDEMPOTENCY_TTL_HOURS` after creation and are pruned hourly.
    """

    class Status(models.TextChoices):
        PROCESSING = "PROCESSING"
        COMPLETED = "COMPLETED"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROCESSING)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    locked_until = models.DateTimeField(help_text="A PROCESSING claim older than this may be taken over.")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "HTTP idempotency key"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "key"], name="http_idempotency_unique_key"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key[:24]} {self.status}"


class ApiKey(AbstractAuthToken):
    """An API key of one user (django-rest-knox's token model, swapped in by KNOX_TOKEN_MODEL).

    Only the SHA-512 digest (`digest`, the primary key) and the first 15 characters (`token_key`,
    knox's lookup prefix, also shown to owners to tell keys apart) are stored; the key itself is
    shown once, when issued. `expiry` None = never expires (API_KEY_TTL_DAYS = 0). Revoking deletes
    the row (audited). `public_id` names the key in the API and the admin without its digest.
    """

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=100)
    last_used_at = models.DateTimeField(null=True, blank=True,
                                        help_text="Updated at most once a minute (API_KEY_LAST_USED_RESOLUTION_SECONDS).")

    class Meta:
        verbose_name = "API key"
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key}…)"
