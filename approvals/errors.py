"""Errors of the confirmation and approval services, with stable codes and HTTP statuses."""
from agentplatform.errors import Conflict, DomainError, NotFound, PermissionDenied


class ConfirmationNotFound(NotFound):
    """Unknown request or token, or one of another tenant or user."""

    code = "CONFIRMATION_INVALID"


class ConfirmationExpired(DomainError):
    """The request expired before the decision (HTTP 410)."""

    code = "CONFIRMATION_EXPIRED"
    http_status = 410


class ConfirmationAlreadyDecided(Conflict):
    """A second decision on a decided request, or a replayed token (HTTP 409)."""

    code = "ALREADY_DECIDED"


class ApprovalForbidden(PermissionDenied):
    """Own request, no `approve_tool`, or a decision of the wrong kind for this request."""

    code = "APPROVAL_FORBIDDEN"


class ReasonRequired(DomainError):
    """A rejection needs a non-blank reason."""

    code = "INVALID_ARGUMENTS"
