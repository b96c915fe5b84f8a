"""Dual control on who may approve (docs/roles.md, "Trust model"): pending control changes and
the provenance of every approver's standing.

A **pending control change** is a change that would empower an approver (granting
`tools.approve_tool` to a user or a group, adding a member to a group that holds it,
re-activating an account that holds it), make an administrator (a second administrator would be
the second person of every later change) or loosen a HIGH/CRITICAL tool's effective policy. It
takes effect only when a second person approves it (agentplatform.controlplane.services).

A **standing source** records, for each piece of an approver's standing (a direct grant, a group
grant, a membership, a re-activation), when it became effective and who proposed and approved
it, so a decision can be counted only from an approver independent of the request
(approvals.independence).
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class PendingControlChange(models.Model):
    """One proposed change that needs a second person. `target` holds the ids it applies to;
    `old_state` / `new_state` what people are shown; `target_key` identifies the change so one
    identical proposal is pending at a time."""

    class Kind(models.TextChoices):
        USER_GRANT = "USER_GRANT", "approve_tool to a user / 授予用户审批权"
        GROUP_GRANT = "GROUP_GRANT", "approve_tool to a group / 授予用户组审批权"
        MEMBERSHIP = "MEMBERSHIP", "member of an approver group / 加入审批组"
        REACTIVATION = "REACTIVATION", "re-activate an approver / 重新启用审批人"
        TOOL_POLICY = "TOOL_POLICY", "loosen a tool's global policy / 放宽工具全局策略"
        TENANT_POLICY = "TENANT_POLICY", "loosen a tenant's tool policy / 放宽租户工具策略"
        ADMIN = "ADMIN", "make an administrator or operator / 设为管理员"
        POLICY_BUNDLE = "POLICY_BUNDLE", "apply a policy bundle that loosens / 应用放宽的策略包"

    class Status(models.TextChoices):
        PENDING = "PENDING"
        APPLIED = "APPLIED"
        REJECTED = "REJECTED"
        EXPIRED = "EXPIRED"
        REFUSED = "REFUSED"  # no longer valid when a second person approved it: nothing applied

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                               help_text="The tenant concerned; empty = platform-wide (a platform operator decides).")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.JSONField(help_text="Ids the change applies to (user_id, group_id, tool_id, policy_id, fields).")
    target_key = models.CharField(max_length=200, db_index=True)
    summary = models.CharField(max_length=500)
    old_state = models.JSONField(default=dict, blank=True)
    new_state = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    proposed_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-proposed_at"]
        verbose_name = "pending control change / 待批准的控制变更"
        verbose_name_plural = "pending control changes / 待批准的控制变更"
        constraints = [models.UniqueConstraint(fields=["target_key"], condition=models.Q(status="PENDING"),
                                               name="one_pending_control_change_per_target")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.summary} ({self.status})"


class StandingSource(models.Model):
    """When one piece of an approver's standing became effective, and who it came from.

    kind USER_GRANT: (user, tool); GROUP_GRANT: (group, tool); MEMBERSHIP: (user, group);
    ACTIVATION: (user). proposer / approver: the people of the control change that applied it
    (proposer alone for a change that needed no second person; both empty for a shell, seed or
    migration). A grant without a row predates this record and counts as held since the
    beginning with unknown people (docs/approvals.md)."""

    class Kind(models.TextChoices):
        USER_GRANT = "USER_GRANT"
        GROUP_GRANT = "GROUP_GRANT"
        MEMBERSHIP = "MEMBERSHIP"
        ACTIVATION = "ACTIVATION"

    key = models.CharField(max_length=100, unique=True, help_text="kind:user:group:tool")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    group = models.ForeignKey("auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    tool = models.ForeignKey("tools.Tool", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    effective_at = models.DateTimeField()
    change = models.ForeignKey(PendingControlChange, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    proposer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    applied_by = models.CharField(max_length=32, help_text="control change, administrator, or shell/seed")

    def __str__(self) -> str:
        return f"{self.key} since {self.effective_at:%Y-%m-%d %H:%M}"
