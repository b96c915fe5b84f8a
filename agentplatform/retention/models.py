"""A tenant's own retention: how many days each class of records stays online (docs/operations.md,
"Retention and storage"). Empty fields follow the global defaults (RETENTION_*_DAYS)."""
from __future__ import annotations

from django.db import models

_DAYS_HELP = "Days online; empty: the platform default; 0: keep forever (platform operators only)."


class TenantRetention(models.Model):
    """Per-tenant overrides of the retention defaults, checked by agentplatform.retention.policy
    (audit never below RETENTION_AUDIT_MIN_DAYS; a tenant administrator may only shorten) and
    audited as a control change (agentplatform.controlplane.receivers.watched)."""

    tenant = models.OneToOneField("tenancy.Tenant", primary_key=True, on_delete=models.CASCADE, related_name="+")
    run_event_days = models.PositiveIntegerField("run events (days)", null=True, blank=True, help_text=_DAYS_HELP)
    conversation_days = models.PositiveIntegerField("conversations and messages (days)", null=True, blank=True,
                                                    help_text=_DAYS_HELP)
    request_days = models.PositiveIntegerField("decided confirmation requests (days)", null=True, blank=True,
                                               help_text=_DAYS_HELP)
    audit_days = models.PositiveIntegerField("audit trail (days)", null=True, blank=True, help_text=_DAYS_HELP)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "retention of a tenant"
        verbose_name_plural = "retention of tenants"

    def __str__(self) -> str:
        return f"retention of {self.tenant_id}"
