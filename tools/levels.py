"""Risk levels and approval policies of a tool: the vocabulary the registry, the policy rules
(tools.policy) and the Tool rows (tools.models) share. Plain choices, importing no model, so the
policy rules can use them without importing the models that call those rules."""
from __future__ import annotations

from django.db import models


class RiskLevel(models.TextChoices):
    """How much harm a call can do, in increasing order."""

    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"


class ApprovalPolicy(models.TextChoices):
    """Who must agree before a call runs, from none to nobody ever."""

    NONE = "NONE", "No confirmation"
    REQUESTER = "REQUESTER", "Requester confirmation"
    APPROVERS = "APPROVERS", "Approvers with quorum"
    DENY = "DENY", "Always deny"
