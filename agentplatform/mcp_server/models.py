"""A gated call that arrived over MCP: what a retry of the same call, and the MCP task of the call,
are matched to (agentplatform.mcp_server.calls)."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class McpCall(models.Model):
    """One gated tool call made over MCP: the confirmation request it created, and the answer once
    it ended.

    A call of the same tool with the same (normalised) arguments under the same API key within
    MCP_RETRY_WINDOW_SECONDS is the same call (a retry): it never creates a second request. `id`
    is the MCP task id of the call. `tool_call_id` is the call id the pipeline and the audit rows
    know it by ("mcp_<hex>"). `result`: the masked answer (ToolResult.to_dict shape) once the call
    ended (ran, was refused, rejected, expired or withdrawn); replayed to every later retry.
    """

    class Status(models.TextChoices):
        WAITING = "WAITING", "Waiting for a decision"
        COMPLETED = "COMPLETED", "Ran (result stored)"
        FAILED = "FAILED", "Ended without running, or failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    api_key = models.ForeignKey("api.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                help_text="Null once the key was revoked (key_name keeps its name).")
    key_name = models.CharField(max_length=100, blank=True)
    conversation_id = models.UUIDField(help_text="The conversation the key's calls are bound to (one per key).")
    tool_name = models.CharField(max_length=100)
    arguments_hash = models.CharField(max_length=64, help_text="Of the requester's normalised arguments.")
    tool_call_id = models.CharField(max_length=128)
    request = models.ForeignKey("approvals.ConfirmationRequest", null=True, blank=True, on_delete=models.PROTECT,
                                related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.WAITING)
    result = models.JSONField(null=True, blank=True, help_text="The masked answer once the call ended.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP call"
        indexes = [models.Index(fields=["api_key", "tool_name", "arguments_hash", "-created_at"],
                                name="mcp_call_retry")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.status} ({self.key_name})"
