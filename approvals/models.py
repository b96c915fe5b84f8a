"""Confirmation requests (one gated tool call each) and the human decisions on them."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class ConfirmationRequest(models.Model):
    """One pending gated tool call, bound to tenant, user, conversation, tool, arguments hash and expiry.

    States (seed 002 section 14): PENDING -> CONFIRMED -> CONSUMED, or EXPIRED, CANCELLED.
    Only the SHA-256 of the requester's token is stored (`token_hash`); approver-gated
    requests have no token. `arguments` are the validated, normalised parameters that will
    run: on approval the stored call is executed, never what a client sends back later.
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        CONFIRMED = "CONFIRMED"
        CONSUMED = "CONSUMED"
        EXPIRED = "EXPIRED"
        CANCELLED = "CANCELLED"

    class Policy(models.TextChoices):
        REQUESTER = "REQUESTER", "Requester confirmation"
        APPROVERS = "APPROVERS", "Approvers with quorum"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="confirmation_requests")
    conversation_id = models.UUIDField(db_index=True)
    run_id = models.UUIDField(null=True, blank=True, db_index=True)
    tool_call_id = models.CharField(max_length=128, blank=True)
    tool = models.ForeignKey("tools.Tool", on_delete=models.PROTECT, related_name="confirmation_requests")
    tool_name = models.CharField(max_length=100)
    arguments = models.JSONField()
    masked_arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    summary = models.CharField(max_length=500)
    risk = models.CharField(max_length=16)
    policy = models.CharField(max_length=16, choices=Policy.choices)
    quorum = models.PositiveSmallIntegerField(default=1)
    token_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    context_excerpt = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "status", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.status} ({self.id})"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.PENDING


class Approval(models.Model):
    """One human decision on a ConfirmationRequest. An approver decides a request once."""

    class Decision(models.TextChoices):
        APPROVE = "APPROVE"
        REJECT = "REJECT"

    request = models.ForeignKey(ConfirmationRequest, on_delete=models.PROTECT, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [models.UniqueConstraint(fields=["request", "approver"], name="one_decision_per_approver")]

    def __str__(self) -> str:
        return f"{self.approver_id} {self.decision} {self.request_id}"
