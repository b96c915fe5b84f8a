"""Errors of dual control, with stable codes (mapped to `{"code", "message", "retryable"}`)."""
from __future__ import annotations

from typing import Any

from core.errors import ConflictError, DomainError, NotFoundError, PermissionDeniedError


class ControlChangeRequired(DomainError):
    """A change that empowers an approver or loosens a HIGH/CRITICAL policy was attempted by a
    person outside an approved control change (HTTP 409). Nothing was changed. `gated`: the
    `guards.gate.Gated` descriptions of what was attempted; the admin turns them into proposals."""

    code = "CONTROL_CHANGE_REQUIRED"
    http_status = 409
    becomes_proposal = True  # the admin's refusal pages re-raise it (tenancy.admin_scope.refused_response)

    def __init__(self, gated: list[Any]) -> None:
        super().__init__("this change needs a second administrator: propose it as a control change "
                         "/ 此变更需第二位管理员批准: " + "; ".join(g.summary for g in gated))
        self.gated = gated


class ControlChangeNotFound(NotFoundError):
    """Unknown change, or one of another tenant."""

    code = "CONTROL_CHANGE_NOT_FOUND"


class ControlChangeForbidden(PermissionDeniedError):
    """The decider may not decide this change: its proposer, the person it empowers, or not an
    administrator of its tenant (nor a platform operator)."""

    code = "CONTROL_CHANGE_FORBIDDEN"


class ControlChangeAlreadyDecided(ConflictError):
    """The change was already applied, rejected, refused or expired (HTTP 409)."""

    code = "CONTROL_CHANGE_DECIDED"


class ControlChangeExpired(DomainError):
    """Nobody decided the change before its deadline (HTTP 410)."""

    code = "CONTROL_CHANGE_EXPIRED"
    http_status = 410


class ControlChangeStale(ConflictError):
    """The change no longer fits the current state (its user moved tenant, became a service
    account, the policy was changed meanwhile ...): refused, nothing applied (HTTP 409)."""

    code = "CONTROL_CHANGE_STALE"


class CredentialChangeRefused(PermissionDeniedError):
    """Someone other than its owner set the password or the e-mail address of an account that
    has signed in or holds approver or administrator standing (HTTP 403): whoever sets a
    person's credential can act as them (agentplatform.controlplane.credentials)."""

    code = "CREDENTIAL_CHANGE_REFUSED"
