"""Errors of the confirmation and approval services, with stable codes and HTTP statuses."""
from dataclasses import dataclass

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


class ApproverNotIndependent(PermissionDenied):
    """The approver holds approve_tool but their decision would not count toward this request's
    quorum: their standing came from the requester, began after the request was created, or they
    are a service account (approvals.independence; docs/approvals.md, "Eligibility")."""

    code = "APPROVER_NOT_INDEPENDENT"


class ReasonRequired(DomainError):
    """A rejection needs a non-blank reason."""

    code = "INVALID_ARGUMENTS"


class ConsumeRefused(DomainError):
    """The decision no longer holds at consume time and the call must not run (nothing ran).

    Raised inside the consuming transaction (which rolls back); the caller records it afterwards
    with `confirmation_refuse`. `code`: POLICY_DENIED, TOOL_DISABLED, PERMISSION_DENIED, a
    precheck's business code, or IDEMPOTENCY_CONFLICT.
    """

    code = "CONSUME_REFUSED"


@dataclass(frozen=True)
class Regate:
    """What a request needs now that the policy in force became stricter than what it carries.

    Raised as `ConfirmationRegated` inside the consuming transaction; the caller applies it after
    the rollback with `confirmation_regate`. policy: "APPROVERS". quorum: approvals needed now.
    reason: why, in words for the requester and the audit trail.
    """

    policy: str
    quorum: int
    risk: str
    ttl_seconds: int
    reason: str


class ConfirmationRegated(DomainError):
    """The policy in force at consume time is stricter than the decision carried: wait again."""

    code = "CONFIRMATION_REGATED"

    def __init__(self, regate: Regate) -> None:
        super().__init__(regate.reason)
        self.regate = regate


class EditInvalid(DomainError):
    """Edited arguments that the tool's schema, business rules, money normalisation or precheck
    refuse (HTTP 400, INVALID_ARGUMENTS). `errors`: [{"field", "error", "code"?}] for the client.
    Nothing is changed."""

    code = "INVALID_ARGUMENTS"

    def __init__(self, message: str, *, errors: list[dict] | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.errors = errors or []


class EditUnchanged(DomainError):
    """The edited arguments bind the same call as the current ones once normalised ("50" and
    "50.00" are one amount): nothing to edit (HTTP 400)."""

    code = "EDIT_UNCHANGED"


class ArgumentsChanged(Conflict):
    """The edit was made on arguments that are no longer the request's (another approver edited
    first): `base_arguments_hash` is stale. Nothing is changed; read the request again (HTTP 409)."""

    code = "ARGUMENTS_CHANGED"
