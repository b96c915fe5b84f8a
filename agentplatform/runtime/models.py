"""Conversations, their messages, runs of the agent loop and each run's ordered event stream."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Conversation(models.Model):
    """A thread between one user and the agent, inside the user's tenant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="conversations")
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Run(models.Model):
    """One execution of the agent loop for one user message (runtime.loop).

    `state` holds the working messages of this run (OpenAI wire format, after the memory prefix)
    and, while AWAITING_CONFIRMATION, `pending`: {tool_call_id: confirmation_id} plus the index of
    the assistant message whose calls wait. `lease_expires_at` bounds a RUNNING claim; a run stuck
    past it is recovered.
    """

    class Status(models.TextChoices):
        RUNNING = "RUNNING"
        AWAITING_CONFIRMATION = "AWAITING_CONFIRMATION"
        COMPLETED = "COMPLETED"
        FAILED = "FAILED"
        CANCELLED = "CANCELLED"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    conversation = models.ForeignKey(Conversation, on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.RUNNING, db_index=True)
    request_id = models.CharField(max_length=64, blank=True)
    iterations = models.PositiveSmallIntegerField(default=0)
    state = models.JSONField(default=dict)
    final_answer = models.TextField(blank=True)
    stop_reason = models.CharField(max_length=32, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # The W3C trace context ({"traceparent", ["tracestate"]}) of the span the run started in, when
    # tracing is on ({} otherwise): a resume continues that trace (agentplatform/runtime/tracing.py).
    trace_context = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.id} {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.COMPLETED, self.Status.FAILED, self.Status.CANCELLED)


class Message(models.Model):
    """One message of a conversation in OpenAI's wire format.

    `in_memory` marks what the memory policy sends to the model on later runs (user messages and
    final answers by default; tool traces too with AGENT_MEMORY_FULL_TOOL_TRACE).
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16)
    content = models.TextField(blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=128, blank=True)
    in_memory = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def wire(self) -> dict:
        """This message as an OpenAI chat message dict."""
        message: dict = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        return message


class RunEvent(models.Model):
    """One event of a run, ordered by `seq` (1, 2, ...). Persisted so a client reconnecting with
    Last-Event-ID misses nothing. Payloads never carry a confirmation token."""

    class Type(models.TextChoices):
        MODEL_TEXT = "MODEL_TEXT"
        TOOL_CALL_STARTED = "TOOL_CALL_STARTED"
        CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"
        TOOL_EXECUTION_COMPLETED = "TOOL_EXECUTION_COMPLETED"
        FINAL_TEXT = "FINAL_TEXT"
        ERROR = "ERROR"
        DONE = "DONE"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=32, choices=Type.choices)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="one_event_per_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class TenantModelQuota(models.Model):
    """A tenant's own limit of model calls per UTC day, overriding TENANT_MODEL_CALLS_PER_DAY
    (0 = no limit). Set by platform operators in the admin (agentplatform.runtime.quota)."""

    tenant = models.OneToOneField("tenancy.Tenant", primary_key=True, on_delete=models.CASCADE, related_name="+")
    calls_per_day = models.PositiveIntegerField(help_text="Model calls per UTC day; 0 = no limit.")

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.calls_per_day}/day"


class ModelCallCount(models.Model):
    """How many model calls a tenant asked for on one UTC day (refused ones included)."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day"], name="model_call_count_per_day")]
