"""Database side of the tool registry: Tool rows (admin overrides, guardian object permissions),
per-tenant policies, and the idempotency records that make side effects run once."""
from __future__ import annotations

from typing import Callable

from django.core.exceptions import ValidationError
from django.db import models

from tools.levels import ApprovalPolicy, RiskLevel
from tools.policy import global_override_errors, tenant_override_errors
from tools.registry import registry

# Why a Tool row may not be enabled now, asked of the apps above this one that know (mcp_sources
# refuses a remote tool whose current definition is not the reviewed one). guard(tool) -> reason,
# "" when it may. Asked by Tool and TenantToolPolicy in clean() (every admin form, list_editable)
# and again in save() (admin actions, services, `manage.py shell`), so no path enables it.
ENABLE_GUARDS: list[Callable[["Tool"], str]] = []


def add_enable_guard(guard: Callable[["Tool"], str]) -> None:
    """Register `guard(tool) -> reason or ""` (see ENABLE_GUARDS); called from an AppConfig.ready."""
    if guard not in ENABLE_GUARDS:
        ENABLE_GUARDS.append(guard)


def enable_refusal(tool: "Tool") -> str:
    """Why `tool` may not be enabled (globally or for a tenant) now, "" when it may."""
    for guard in ENABLE_GUARDS:
        reason = guard(tool)
        if reason:
            return reason
    return ""


class Tool(models.Model):
    """Mirror of one registered tool. Admin overrides (blank = the registry's value) live here,
    and guardian grants `use_tool` / `approve_tool` on each row to users and groups."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    source = models.CharField(max_length=120, default="local", db_index=True,
                              help_text='"local" (code in this repository) or "mcp:<server>" (a remote MCP server).')
    owner = models.CharField(max_length=200, blank=True,
                             help_text="The team or person answering for this tool: who to ask when it misbehaves.")
    version = models.CharField(max_length=64, blank=True, help_text="The tool's version, recorded in every audit row.")
    tenant = models.ForeignKey("tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                               help_text="Set for a tool of one tenant's MCP server: never offered to another tenant.")
    registered = models.BooleanField(default=True, help_text="False when the code no longer registers it.")
    default_risk = models.CharField(max_length=16, choices=RiskLevel.choices)
    default_policy = models.CharField(max_length=16, choices=ApprovalPolicy.choices)
    risk_override = models.CharField(max_length=16, choices=RiskLevel.choices, blank=True)
    policy_override = models.CharField(max_length=16, choices=ApprovalPolicy.choices, blank=True)
    quorum = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Approvals needed; blank = registry.")
    ttl_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Confirmation TTL; blank = registry.")
    critical_floor_waiver = models.TextField(
        blank=True, help_text="Platform operators only: the written reason for taking a CRITICAL tool below two "
                              "distinct approvers. Blank = the floor holds whatever the overrides say.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        permissions = [
            ("use_tool", "May have the agent call this tool"),
            ("approve_tool", "May approve calls of this tool"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def risk(self) -> str:
        return self.risk_override or self.default_risk

    @property
    def policy(self) -> str:
        return self.policy_override or self.default_policy

    def clean(self) -> None:
        """Refuse global overrides that take a CRITICAL tool below two approvers without a reason
        (tools.policy.global_override_errors), and enabling a tool an enable guard refuses (a remote
        tool whose definition is not the reviewed one). Raises ValidationError."""
        errors = global_override_errors(registry.get(self.name), self)
        refusal = enable_refusal(self) if self.enabled else ""
        if refusal:
            errors = {**errors, "enabled": f"cannot be enabled: {refusal} / 此工具现在不能启用"}
        if errors:
            raise ValidationError(errors)

    def save(self, *args, **kwargs) -> None:
        """Save; raises ValidationError (nothing saved) when the row would be enabled while an
        enable guard refuses it: every path, not only forms, goes through here."""
        if self.enabled:
            refusal = enable_refusal(self)
            if refusal:
                raise ValidationError({"enabled": f"{self.name} cannot be enabled: {refusal}"})
        super().save(*args, **kwargs)


class TenantToolPolicy(models.Model):
    """Per-tenant whitelist entry: a tool is offered in a tenant only where `enabled`.

    A tenant without a row for a tool does not get it (fail closed); the demo seeds rows.
    """

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="tool_policies")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="tenant_policies")
    enabled = models.BooleanField(default=True)
    risk_override = models.CharField(max_length=16, choices=RiskLevel.choices, blank=True,
                                     help_text="Raise the risk for this tenant only; blank = the global value.")
    quorum = models.PositiveSmallIntegerField(null=True, blank=True,
                                              help_text="Raise the approvals needed in this tenant; blank = global.")
    ttl_seconds = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="Shorten the confirmation TTL in this tenant; blank = global.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tenant tool policy"
        verbose_name_plural = "tenant tool policies"
        constraints = [models.UniqueConstraint(fields=["tenant", "tool"], name="one_policy_per_tenant_tool")]

    def __str__(self) -> str:
        return f"{self.tenant} / {self.tool} ({'on' if self.enabled else 'off'})"

    def clean(self) -> None:
        """Tenant overrides only tighten (tools.policy.tenant_override_errors); an entry is not
        switched on for a tool an enable guard refuses. Raises ValidationError."""
        if self.tool_id is None:
            return
        if self.tool.tenant_id is not None and self.tenant_id is not None and self.tool.tenant_id != self.tenant_id:
            raise ValidationError({"tool": "this tool belongs to another tenant's MCP server"})
        errors = tenant_override_errors(registry.get(self.tool.name), self.tool, self)
        refusal = self._switch_on_refusal()
        if refusal:
            errors = {**errors, "enabled": f"cannot be enabled: {refusal} / 此工具现在不能启用"}
        if errors:
            raise ValidationError(errors)

    def _switch_on_refusal(self) -> str:
        """Why this entry may not be switched on now ("" when it may, or when it is not being
        switched on: an entry that stays enabled may still be tightened)."""
        if not self.enabled or self.tool_id is None:
            return ""
        if self.pk is not None and type(self)._default_manager.filter(pk=self.pk, enabled=True).exists():
            return ""
        return enable_refusal(self.tool)

    def save(self, *args, **kwargs) -> None:
        """Save; raises ValidationError (nothing saved) when an entry would be switched on for a
        tool an enable guard refuses (admin actions, services and the shell come through here)."""
        refusal = self._switch_on_refusal()
        if refusal:
            raise ValidationError({"enabled": f"{self.tool.name} cannot be enabled for a tenant: {refusal}"})
        super().save(*args, **kwargs)


class IdempotencyRecord(models.Model):
    """Claim and stored result of one side effect, unique on (tenant, key).

    The claim is the INSERT: two racing callers cannot both insert. For local business changes the
    record and the change commit in one transaction, so a SUCCEEDED record means the change exists.
    """

    class Status(models.TextChoices):
        PROCESSING = "PROCESSING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"
        OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=128)
    tool_name = models.CharField(max_length=100)
    arguments_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROCESSING)
    result = models.JSONField(null=True, blank=True)
    business_result_id = models.CharField(max_length=128, blank=True)
    locked_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_tenant_key")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.key[:12]} {self.status}"
