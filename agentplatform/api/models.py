"""HTTP Idempotency-Key records of the REST API (IETF httpapi "The Idempotency-Key HTTP Header
Field" draft): one row per (tenant, user, key), claimed by its INSERT."""
from __future__ import annotations

from django.conf import settings
from django.db import models


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
