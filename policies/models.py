"""Policy bundles: per tenant, versioned Cedar policies plus limits over history (docs/policy.md).

A **bundle** version is immutable once applied; the tenant's bundle in force is its highest
version. **Limit usage** rows are the history a limit counts: one per call a limit applies to,
counted while the call ran or its request is still open. **Shadow verdicts** record what a
shadow rule or limit would have done, without enforcing it. A **kill switch** row is one stop of a
tool in one tenant or in every tenant, in force until released (policies.kill_switch).
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class PolicyBundle(models.Model):
    """One applied version of a tenant's bundle. `source` is the YAML as uploaded; `cedar` and
    `limits` are what was parsed and validated from it (policies.documents)."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    version = models.PositiveIntegerField(help_text="1, 2, ... per tenant; the highest is in force.")
    source = models.TextField(help_text="The bundle file as applied (YAML).")
    cedar = models.TextField(blank=True, help_text="The Cedar policies of the bundle.")
    limits = models.JSONField(default=list, blank=True, help_text="The limits of the bundle, as validated.")
    digest = models.CharField(max_length=64, help_text="SHA-256 of `source`.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    comment = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "version"], name="one_bundle_per_tenant_version")]
        ordering = ["tenant", "-version"]
        verbose_name = "policy bundle / 策略包"

    def __str__(self) -> str:
        return f"{self.tenant_id} v{self.version}"


class LimitUsage(models.Model):
    """One call counted by one limit: the key it was counted under (the value of `per`), the
    amount of its `max_sum` argument, and the request it waits on (None: it ran without one).
    A row counts while its call ran, or its request is pending, confirmed or consumed
    (policies.limits)."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    limit_id = models.CharField(max_length=100)
    tool_name = models.CharField(max_length=100)
    key = models.CharField(max_length=200, help_text="The value of the limit's `per` for this call.")
    amount = models.DecimalField(max_digits=20, decimal_places=4, null=True, blank=True)
    occurred_at = models.DateTimeField()
    confirmation = models.ForeignKey("approvals.ConfirmationRequest", null=True, blank=True,
                                     on_delete=models.PROTECT, related_name="+")
    tool_call_id = models.CharField(max_length=128, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="+")
    released = models.BooleanField(default=False, help_text="The call did not run: no longer counted.")

    class Meta:
        indexes = [models.Index(fields=["tenant", "limit_id", "key", "occurred_at"], name="limit_usage_window")]


class ShadowVerdict(models.Model):
    """What one shadow rule or limit would have done to one call (`would`), recorded, not enforced."""

    class Would(models.TextChoices):
        DENY = "DENY", "would deny / 将拒绝"
        APPROVAL = "APPROVAL", "would require approval / 将需要审批"
        CONFIRM = "CONFIRM", "would require confirmation / 将需要确认"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    bundle_version = models.PositiveIntegerField()
    rule_id = models.CharField(max_length=100, help_text="The @id of the rule or the id of the limit.")
    would = models.CharField(max_length=16, choices=Would.choices)
    quorum = models.PositiveSmallIntegerField(null=True, blank=True)
    tool_name = models.CharField(max_length=100)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="+")
    tool_call_id = models.CharField(max_length=128, blank=True)
    conversation_id = models.UUIDField(null=True, blank=True)
    occurred_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "rule_id", "occurred_at"], name="shadow_verdict_rule")]


class KillSwitch(models.Model):
    """One stop of a tool (the kill switch): while `released_at` is empty, every new call of
    `tool_name` in `tenant` (None: in every tenant) is denied with TOOL_STOPPED and `reason`, and
    a decision of it is refused when consumed (policies.kill_switch). Engaged and released by
    separate, audited actions; a row is never deleted, so the history of stops stays readable.
    At most one active stop per tenant and tool, and one active stop everywhere per tool."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                               help_text="Empty: the tool is stopped in every tenant (a platform operator's stop).")
    tool_name = models.CharField(max_length=100)
    reason = models.CharField(max_length=500, help_text="Why: what the model and the requesters read.")
    engaged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    engaged_at = models.DateTimeField()
    released_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+")
    released_at = models.DateTimeField(null=True, blank=True, help_text="Empty while the stop is in force.")
    release_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [
            # Also the index of the gate's lookup (tool, then tenant, active rows only).
            models.UniqueConstraint(fields=["tool_name", "tenant"], condition=models.Q(released_at__isnull=True),
                                    name="one_active_stop_per_tenant_tool"),
            models.UniqueConstraint(fields=["tool_name"],
                                    condition=models.Q(released_at__isnull=True, tenant__isnull=True),
                                    name="one_active_global_stop_per_tool"),
        ]
        ordering = ["-engaged_at"]
        verbose_name = "kill switch / 工具停用"
        verbose_name_plural = "kill switches / 工具停用"

    def __str__(self) -> str:
        where = self.tenant_id if self.tenant_id is not None else "every tenant"
        state = "released" if self.released_at else "in force"
        return f"{self.tool_name} stopped in {where} ({state})"

    @property
    def active(self) -> bool:
        return self.released_at is None
